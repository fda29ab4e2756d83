"""driver-manager's records on the host: its state between runs and its first-touch baseline for the uninstall.

`StateFile` is `ports.node.DriverStateStore` (what the file says: `metax_core.node.driver_state`); `BaselineFile`
is `ports.node.DriverBaselineStore` (`metax_core.node.uninstall.Baseline`, written once before the first round
changes the host, and the paths under `uninstall.OWNED_DIRS` the undo compares with it). Both files are replaced
atomically (`hostfiles.atomic_write`), so a driver-manager killed mid-write finds the old record or the new one.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
from collections.abc import Sequence

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.node import driver_state, uninstall
from metax_hw import hostfiles

log = logging.getLogger(__name__)

BASELINE_FILE = "/var/lib/metax/driver-manager/baseline.json"


class StateFile:
    def __init__(self, host_root: pathlib.Path) -> None:
        self.path = host_root / driver_state.STATE_FILE.lstrip("/")

    def read(self) -> driver_state.HostState:
        try:
            return driver_state.parse(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return driver_state.HostState()
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return driver_state.HostState()

    def write(self, state: driver_state.HostState) -> None:
        try:
            hostfiles.atomic_write(self.path, driver_state.render(state))
        except OSError as exc:
            raise HardwareError("write driver-manager's state", str(self.path), str(exc.strerror or exc)) from exc


class BaselineFile:
    def __init__(self, host_root: pathlib.Path) -> None:
        self.root = host_root
        self.path = host_root / BASELINE_FILE.lstrip("/")

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> uninstall.Baseline | None:
        try:
            return uninstall.parse_baseline(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, InvalidSpec) as exc:
            log.error("ignoring unreadable %s: %s", self.path, exc)
            return None

    def write(self, baseline: uninstall.Baseline) -> None:
        try:
            hostfiles.atomic_write(self.path, uninstall.render_baseline(baseline))
        except OSError as exc:
            raise HardwareError("record the host before install", str(self.path), str(exc.strerror or exc)) from exc

    def owned_paths(self) -> list[str]:
        found: list[str] = []
        for top in uninstall.OWNED_DIRS:
            base = self.root / top
            if not base.exists():
                continue
            found.append(top)
            for directory, dirs, files in os.walk(base):
                for name in [*dirs, *files]:
                    found.append(str((pathlib.Path(directory) / name).relative_to(self.root)))
        return found

    def remove(self, paths: Sequence[str]) -> list[str]:
        kept: list[str] = []
        for rel in paths:
            path = self.root / rel
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            except FileNotFoundError:
                continue
            except OSError as exc:
                kept.append(f"{'/' + rel}: {exc}")
        return kept
