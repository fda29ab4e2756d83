"""The SDK versions on the host and the records of their use (`metax_core.ports.node.SdkStore`, the maca agent's).

Why here, in the host adapter: every host write of the maca agent is here, each one restartable. A version is copied
to a hidden ``.<version>.partial-<n>`` sibling and renamed into place (a half-copied version is never visible;
leftovers are removed at the next round); a version to remove is renamed to ``.<version>.removing`` before the
records are read again (`metax_core.runtime.sdk`'s removal protocol with the edit service), and renamed back when a
record names it; a ``.removing`` left by a killed agent is renamed back too, and the next round decides again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import secrets
import shutil
from collections.abc import Sequence

from metax_core import versions
from metax_core.errors import HardwareError, InvalidSpec
from metax_core.runtime import sdk

log = logging.getLogger(__name__)


class HostSdkStore:
    def __init__(self, sdk_dir: pathlib.Path, in_use_dir: pathlib.Path, state_root: pathlib.Path) -> None:
        self.sdk_dir = sdk_dir
        self.in_use_dir = in_use_dir
        self.state_root = state_root

    def names(self) -> list[str]:
        try:
            return os.listdir(self.sdk_dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise HardwareError("list MXMACA versions", str(self.sdk_dir), str(exc)) from exc

    def installed(self) -> list[versions.Version]:
        return sdk.installed(self.names())

    def clean(self) -> list[str]:
        """Remove what an interrupted install left, put back what an interrupted removal hid."""
        done = []
        for name in sdk.leftovers(self.names()):
            path = self.sdk_dir / name
            if name.endswith(sdk.REMOVING):
                back = self.sdk_dir / name[1 : -len(sdk.REMOVING)]
                if not back.exists():
                    path.rename(back)
                    done.append(f"restored {back.name}")
                    continue
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {name}")
        return done

    def install(self, want: sdk.Wanted) -> None:
        source = pathlib.Path(want.payload) / sdk.PAYLOAD_SUBDIR
        if not source.is_dir():
            raise HardwareError(
                "install MXMACA", str(want.version), f"{want.image} has no {sdk.PAYLOAD_SUBDIR}/ in its /payload"
            )
        self.sdk_dir.mkdir(parents=True, exist_ok=True)
        final = self.sdk_dir / sdk.version_dir(want.version)
        staging = self.sdk_dir / sdk.partial_name(want.version, secrets.token_hex(4))
        try:
            shutil.copytree(source, staging, symlinks=True)
            _sync_tree(staging)
            staging.rename(final)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if final.is_dir():
                return
            raise HardwareError("install MXMACA", str(want.version), f"cannot copy to {final}: {exc}") from exc
        log.info("installed MXMACA %s at %s", want.version, final)

    def hide(self, version: versions.Version) -> None:
        (self.sdk_dir / sdk.version_dir(version)).rename(self.sdk_dir / sdk.removing_name(version))

    def unhide(self, version: versions.Version) -> None:
        (self.sdk_dir / sdk.removing_name(version)).rename(self.sdk_dir / sdk.version_dir(version))

    def uses(self) -> tuple[list[sdk.Use], list[str]]:
        """(records of live containers, files of gone containers), removing nothing."""
        live: list[sdk.Use] = []
        gone: list[str] = []
        try:
            names = sorted(n for n in os.listdir(self.in_use_dir) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return [], []
        for name in names:
            try:
                use = sdk.parse_use((self.in_use_dir / name).read_text())
            except (OSError, InvalidSpec) as exc:
                log.warning("unreadable in-use record %s (removed): %s", name, exc)
                gone.append(name)
                continue
            if self.alive(use):
                live.append(use)
            else:
                gone.append(name)
        return live, gone

    def alive(self, use: sdk.Use) -> bool:
        """runc keeps ``<state dir>/state.json`` from create to delete."""
        return (self.state_root / use.state_dir.lstrip("/") / "state.json").is_file()

    def forget(self, names: Sequence[str]) -> None:
        for name in names:
            (self.in_use_dir / name).unlink(missing_ok=True)

    def remove(self, version: versions.Version) -> bool:
        """Hide, re-read the records, remove unless a live container uses it; True when removed."""
        self.hide(version)
        live, _ = self.uses()
        if any(u.version == sdk.version_dir(version) for u in live):
            self.unhide(version)
            return False
        shutil.rmtree(self.sdk_dir / sdk.removing_name(version))
        log.info("removed MXMACA %s", version)
        return True

    def tidy(self) -> None:
        shutil.rmtree(self.in_use_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: a version stays (its container still runs)
            self.sdk_dir.rmdir()


def _sync_tree(root: pathlib.Path) -> None:
    """fsync every file of a copied tree, so the rename publishes data that survives a crash."""
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
