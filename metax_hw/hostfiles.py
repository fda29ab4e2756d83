"""Files the node agents share with the host: the CDI spec, the readiness signals, and atomic host writes.

Both are read by other processes while we write them (the container runtime watches the CDI directory;
gpu-device polls the readiness directory), so every write goes to a temporary file in the same directory
and is renamed over the target: a reader sees the old file or the new one, never half of one. Temporary
names end in ``.tmp`` so the CDI cache, which only loads ``*.json``/``*.yaml``, never picks one up.

Other node agents publish their readiness with `FileReadinessBoard(host_root).publish(...)`. Why here, in the
host adapter: every agent writes host files (probe, state, readiness) and none of that is the kubelet's
device-plugin protocol, where this module lived before (issue 20, item 8).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import tempfile
from collections.abc import Mapping
from typing import Any

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.node import cdi, readiness
from metax_core.wire import host

log = logging.getLogger(__name__)

DEFAULT_CDI_DIR = host.CDI_DIR


def atomic_write(
    path: pathlib.Path,
    text: str,
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
    staging: pathlib.Path | None = None,
) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, durable across a crash; the file gets
    ``mode`` (and ``owner``, uid and gid) before it is renamed into place, so it is never readable by more. The
    temporary is made in ``staging`` (on the same filesystem) when a reader takes *every* file of ``path``'s
    directory (CRI-O's ``crio.conf.d``), else beside ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=staging or path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_file(path: pathlib.Path) -> None:
    """Remove ``path`` if it is there (an agent's probe file); OSError when it cannot be removed."""
    path.unlink(missing_ok=True)


def remove_empty_dir(path: pathlib.Path) -> None:
    """Remove the directory ``path`` if it is there and empty (one agents share: the last one out removes it)."""
    with contextlib.suppress(OSError):  # absent, or another agent's file is still there
        path.rmdir()


class CdiSpecFile:
    """One CDI spec file in the host's CDI directory: gpu-device's one of kind ``metax-tech.com/gpu``, or
    (``file_name``) one of the DRA driver's per-claim files.

    `write` compares with what is on disk, not with what it wrote last: a file removed or replaced behind
    the agent's back is written again (or the write fails, loudly), so "written" always means "on disk".
    """

    def __init__(self, cdi_dir: pathlib.Path, kind: str = cdi.KIND, file_name: str | None = None) -> None:
        self.path = cdi_dir / (file_name or cdi.spec_file_name(kind))

    def _on_disk(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise HardwareError("read CDI spec", str(self.path), str(exc)) from exc

    def read(self) -> dict[str, Any] | None:
        """The spec on disk, None when there is none; HardwareError when something unreadable is there."""
        text = self._on_disk()
        if text is None:
            return None
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise HardwareError("read CDI spec", str(self.path), f"not JSON: {exc}") from exc
        if not isinstance(spec, dict):
            raise HardwareError("read CDI spec", str(self.path), "not a JSON object")
        return spec

    def write(self, spec: Mapping[str, Any] | None) -> bool:
        """Make the file hold ``spec`` (remove it for None), durably; True when the file changed."""
        if spec is None:
            return self.remove()
        text = cdi.render(spec)
        try:
            if self._on_disk() == text:
                return False
        except HardwareError:
            pass  # something unreadable sits there: replace it (or fail below)
        try:
            atomic_write(self.path, text)
        except OSError as exc:  # strerror: the message names no random temporary file (logged once)
            raise HardwareError("write CDI spec", str(self.path), str(exc.strerror or exc)) from exc
        log.info("wrote CDI spec %s (%d devices)", self.path, len(spec.get("devices", ())))
        return True

    def remove(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise HardwareError("remove CDI spec", str(self.path), str(exc)) from exc
        log.info("removed CDI spec %s", self.path)
        return True


class FileReadinessBoard:
    """`ports.node.ReadinessBoard` on ``<host_root>/run/metax/ready/<component>.json``."""

    def __init__(self, host_root: pathlib.Path, directory: str = readiness.READY_DIR) -> None:
        self.directory = host_root / directory

    def _path(self, component: str) -> pathlib.Path:
        readiness.check_component(component)
        return self.directory / f"{component}.json"

    def publish(self, signal: readiness.ComponentReadiness) -> None:
        text = json.dumps(readiness.to_document(signal), indent=2, sort_keys=True) + "\n"
        try:
            atomic_write(self._path(signal.component), text)
        except OSError as exc:
            raise HardwareError("publish readiness", signal.component, str(exc)) from exc

    def withdraw(self, component: str) -> None:
        try:
            self._path(component).unlink(missing_ok=True)
        except OSError as exc:
            raise HardwareError("withdraw readiness", component, str(exc)) from exc

    def read_all(self) -> dict[str, readiness.ComponentReadiness]:
        signals: dict[str, readiness.ComponentReadiness] = {}
        try:
            paths = sorted(self.directory.glob("*.json"))
        except OSError as exc:
            raise HardwareError("read readiness", str(self.directory), str(exc)) from exc
        for path in paths:
            try:
                signal = readiness.from_document(json.loads(path.read_text(encoding="utf-8")), path=path.name)
            except FileNotFoundError:
                continue  # withdrawn between glob and read
            except (OSError, ValueError, InvalidSpec) as exc:
                log.warning("ignoring unreadable readiness file %s: %s", path, exc)
                continue
            if signal.component != path.stem:
                log.warning("ignoring %s: it speaks for component %r", path, signal.component)
                continue
            signals[signal.component] = signal
        return signals
