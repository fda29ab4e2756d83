"""The host files container-runtime writes, each through a temporary file and a rename (never half-written).

`HostFiles` is `metax_core.ports.node.RuntimeFiles` on the host: it reads and writes host paths under the agent's
host root, and a rewritten file keeps its mode and owner (a new one gets the mode it is given:
`metax_core.runtime.record.created_mode`); `Ledger` keeps the record of edits (`metax_core.runtime.record`), which
is always written *before* the files it describes, so an agent killed between any two steps finds on restart either
the old files with a record that already knows their text, or the new files: in both cases the record's ``before``
is the text that was there before us. `install_wrapper` puts the wrapper on the host (copy to a hidden sibling,
chmod, rename): the runtime never sees a partial binary.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import stat
import tempfile

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.ports import node as node_ports
from metax_core.runtime import containerd_imports, record
from metax_hw import hostfiles


class HostFiles:
    def __init__(self, host_root: pathlib.Path) -> None:
        self.host_root = host_root
        self.staging: dict[str, str] = {}
        """Directories whose every file a runtime reads (CRI-O's ``crio.conf.d``, hidden files included) and where
        a write's temporary goes instead (their parent): a temporary left by a killed write is never loaded."""

    def stage_outside(self, directory: str) -> None:
        self.staging[directory.rstrip("/")] = os.path.dirname(directory.rstrip("/")) or "/"

    def _staging(self, path: str) -> pathlib.Path | None:
        outside = self.staging.get(os.path.dirname(path))
        return None if outside is None else self.at(outside)

    def at(self, path: str) -> pathlib.Path:
        return self.host_root / path.lstrip("/")

    def read(self, path: str) -> str | None:
        try:
            return self.at(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise HardwareError("read", path, str(exc)) from exc

    def stat(self, path: str) -> record.FileMode | None:
        """The file's permission bits and owner (None: no file)."""
        try:
            st = self.at(path).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HardwareError("stat", path, str(exc)) from exc
        return record.FileMode(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)

    def write(self, path: str, text: str, mode: record.FileMode | None = None) -> None:
        """``text`` into ``path`` through a rename: with ``mode`` when given, else the file's own mode and owner
        (a new file: 0644)."""
        keep = mode or self.stat(path)
        staging = self._staging(path)
        try:
            if keep is None:
                hostfiles.atomic_write(self.at(path), text, staging=staging)
            else:
                hostfiles.atomic_write(self.at(path), text, keep.mode, (keep.uid, keep.gid), staging=staging)
        except OSError as exc:
            raise HardwareError("write", path, str(exc.strerror or exc)) from exc

    def put(self, path: str, text: str | None, mode: record.FileMode | None = None) -> None:
        """Make the file ``text`` (None: no file), with ``mode`` when given (see `write`)."""
        if text is None:
            self.remove(path)
        elif self.read(path) != text or (mode is not None and self.stat(path) != mode):
            self.write(path, text, mode)

    def remove(self, path: str) -> None:
        try:
            self.at(path).unlink(missing_ok=True)
        except OSError as exc:
            raise HardwareError("remove", path, str(exc)) from exc

    def glob(self, pattern: str) -> tuple[str, ...]:
        """The host paths matching ``pattern`` as Go's ``filepath.Glob`` finds them (containerd's imports): sorted,
        ``*`` never crossing ``/``, hidden names included, unreadable directories skipped."""
        found = ["/"]
        for part in pattern.strip("/").split("/"):
            following: list[str] = []
            for base in found:
                if not any(c in part for c in "*?[\\"):
                    candidate = os.path.join(base, part)
                    if os.path.lexists(self.at(candidate)):
                        following.append(candidate)
                    continue
                try:
                    names = sorted(os.listdir(self.at(base)))
                except OSError:
                    continue
                following += [os.path.join(base, n) for n in names if containerd_imports.glob_match(part, n)]
            found = following
        return tuple(sorted(found))

    def scratch(self, path: str, text: str) -> str:
        """A private (0600) temporary sibling of ``path`` holding ``text`` (named like `clean_temporaries`'s
        leftovers, so a kill between writing and removing it is cleaned next round); its host path."""
        target = self.at(path)
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.baseline-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise HardwareError("write a scratch copy of", path, str(exc.strerror or exc)) from exc
        return "/" + str(pathlib.Path(tmp).relative_to(self.host_root)).lstrip("/")

    def missing_dirs(self, path: str) -> tuple[str, ...]:
        """The directories a write of ``path`` would create, outermost first (host paths)."""
        missing: list[str] = []
        parent = os.path.dirname(path.rstrip("/"))
        while parent not in ("", "/") and not self.at(parent).exists():
            missing.insert(0, parent)
            parent = os.path.dirname(parent)
        return tuple(missing)

    def remove_dir_if_empty(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self.at(path).rmdir()

    def install_wrapper(self, source: str, path: str) -> bool:
        """Copy ``source`` (a file of this process) to host ``path`` (mode 0755) unless it is there already; True
        when it was copied."""
        target = self.at(path)
        try:
            data = pathlib.Path(source).read_bytes()
        except OSError as exc:
            raise HardwareError("read the wrapper", source, str(exc)) from exc
        with contextlib.suppress(OSError):
            if target.read_bytes() == data and os.access(target, os.X_OK):
                return False
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.chmod(tmp, 0o755)
                os.replace(tmp, target)
            except BaseException:
                pathlib.Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise HardwareError("install the wrapper", path, str(exc)) from exc
        return True

    def clean_temporaries(self, path: str) -> None:
        """The temporary a write killed midway leaves (``.<name>.*.tmp``, `hostfiles.atomic_write`): beside the
        file, or in its staging directory."""
        target = self.at(path)
        staging = self._staging(path)
        with contextlib.suppress(OSError):
            for directory in (target.parent, *([staging] if staging is not None else [])):
                for leftover in directory.glob(f".{target.name}.*.tmp"):
                    leftover.unlink(missing_ok=True)

    def wrapper_ok(self, path: str) -> bool:
        target = self.at(path)
        return target.is_file() and os.access(target, os.X_OK)

    def stamp(self, path: str) -> tuple[int, int, int] | None:
        try:
            st = self.at(path).stat()
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def clean_partials(self, directory: str) -> None:
        """Leftovers of a copy that was killed midway (``.<name>.*.partial``)."""
        with contextlib.suppress(OSError):
            for leftover in self.at(directory).glob(".*.partial"):
                leftover.unlink(missing_ok=True)


class Ledger:
    """The record file on the host."""

    def __init__(self, files: node_ports.RuntimeFiles, path: str = record.PATH) -> None:
        self.files = files
        self.path = path

    def load(self) -> record.Record | None:
        text = self.files.read(self.path)
        if text is None:
            return None
        try:
            return record.parse(text, self.path)
        except InvalidSpec as exc:
            raise HardwareError("read the record of our edits", self.path, str(exc)) from exc

    def save(self, entry: record.Record | None) -> None:
        if entry is None or not entry.files:
            self.clear()
        else:
            self.files.put(self.path, record.render(entry), record.PRIVATE)

    def clear(self) -> None:
        self.files.remove(self.path)
        self.files.remove_dir_if_empty(os.path.dirname(self.path))
