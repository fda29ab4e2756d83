"""An in-memory host file tree for container-runtime (`metax_core.ports.node.RuntimeFiles`).

Why in memory: the round's decisions (what to back up, write, restore) are checked fastest against a tree the test
can read and change directly (``files``, ``dirs``); the real adapter (`metax_hw.runtime_files.HostFiles`) runs the
same contract cases on a temporary directory (`tests/contract/hardware/test_runtime_files.py`), so a path, mode or
glob answer that differs between them fails there. Writes are whole, as the real adapter's renames make them.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Mapping, Sequence

import attrs

from metax_core.errors import HardwareError
from metax_core.runtime import containerd_imports, record


@attrs.define
class FakeFile:
    data: bytes
    mode: record.FileMode
    generation: int


class FakeRuntimeFiles:
    def __init__(
        self, dirs: Sequence[str] = (), sources: Mapping[str, bytes] | None = None, owner: tuple[int, int] | None = None
    ) -> None:
        self.files: dict[str, FakeFile] = {}
        self.dirs: set[str] = {"/"}
        for directory in dirs:
            self._make_dirs(directory)
        self.sources = dict(sources or {})
        """What `install_wrapper` can copy: a source path of the agent's image → its bytes."""
        self.owner = owner or (os.getuid(), os.getgid())
        """Who a new file belongs to (the real adapter's: the process's)."""
        self.staging: dict[str, str] = {}
        self._generation = 0

    # -- the tree ----------------------------------------------------------------------------------------------

    def _make_dirs(self, directory: str) -> None:
        while directory not in ("", "/"):
            self.dirs.add(directory)
            directory = posixpath.dirname(directory)

    def _exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def _children(self, directory: str) -> list[str]:
        return sorted(
            {posixpath.basename(p) for p in (*self.files, *self.dirs) if p != "/" and posixpath.dirname(p) == directory}
        )

    def _put_file(self, path: str, data: bytes, mode: record.FileMode) -> None:
        self._make_dirs(posixpath.dirname(path))
        self._generation += 1
        self.files[path] = FakeFile(data, mode, self._generation)

    # -- the port ----------------------------------------------------------------------------------------------

    def stage_outside(self, directory: str) -> None:
        self.staging[directory.rstrip("/")] = posixpath.dirname(directory.rstrip("/")) or "/"

    def read(self, path: str) -> str | None:
        found = self.files.get(path)
        if found is None:
            return None
        try:
            return found.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HardwareError("read", path, str(exc)) from exc

    def stat(self, path: str) -> record.FileMode | None:
        found = self.files.get(path)
        return None if found is None else found.mode

    def write(self, path: str, text: str, mode: record.FileMode | None = None) -> None:
        keep = mode or self.stat(path) or record.FileMode(record.DEFAULT_MODE, *self.owner)
        self._put_file(path, text.encode("utf-8"), keep)

    def put(self, path: str, text: str | None, mode: record.FileMode | None = None) -> None:
        if text is None:
            self.remove(path)
        elif self.read(path) != text or (mode is not None and self.stat(path) != mode):
            self.write(path, text, mode)

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def glob(self, pattern: str) -> tuple[str, ...]:
        found = ["/"]
        for part in pattern.strip("/").split("/"):
            following: list[str] = []
            for base in found:
                if not any(c in part for c in "*?[\\"):
                    if self._exists(posixpath.join(base, part)):
                        following.append(posixpath.join(base, part))
                    continue
                if base in self.dirs:
                    names = self._children(base)
                    following += [posixpath.join(base, n) for n in names if containerd_imports.glob_match(part, n)]
            found = following
        return tuple(sorted(found))

    def scratch(self, path: str, text: str) -> str:
        self._generation += 1
        name = f"{posixpath.dirname(path)}/.{posixpath.basename(path)}.baseline-{self._generation}.tmp"
        self._put_file(name, text.encode("utf-8"), record.FileMode(0o600, *self.owner))
        return name

    def missing_dirs(self, path: str) -> tuple[str, ...]:
        missing: list[str] = []
        parent = posixpath.dirname(path.rstrip("/"))
        while parent not in ("", "/") and not self._exists(parent):
            missing.insert(0, parent)
            parent = posixpath.dirname(parent)
        return tuple(missing)

    def remove_dir_if_empty(self, path: str) -> None:
        if path in self.dirs and not self._children(path):
            self.dirs.discard(path)

    def install_wrapper(self, source: str, path: str) -> bool:
        data = self.sources.get(source)
        if data is None:
            raise HardwareError("read the wrapper", source, "No such file or directory")
        found = self.files.get(path)
        if found is not None and found.data == data and found.mode.mode & 0o111:
            return False
        self._put_file(path, data, record.FileMode(0o755, *self.owner))
        return True

    def wrapper_ok(self, path: str) -> bool:
        found = self.files.get(path)
        return found is not None and bool(found.mode.mode & 0o111)

    def clean_temporaries(self, path: str) -> None:
        directory, name = posixpath.split(path)
        staging = self.staging.get(directory)
        for where in (directory, *([staging] if staging is not None else [])):
            for leftover in self._children(where):
                if fnmatch.fnmatchcase(leftover, f".{name}.*.tmp"):
                    self.files.pop(posixpath.join(where, leftover), None)

    def clean_partials(self, directory: str) -> None:
        for leftover in self._children(directory):
            if fnmatch.fnmatchcase(leftover, ".*.partial"):
                self.files.pop(posixpath.join(directory, leftover), None)

    def stamp(self, path: str) -> tuple[int, int, int] | None:
        found = self.files.get(path)
        return None if found is None else (id(found), len(found.data), found.generation)
