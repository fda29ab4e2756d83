"""What the container-edit service reads from the host and the record it writes (`ports.node.ContainerEditHost`).

Why here, in the host adapter: the edit is pure (`metax_core.runtime.container_edit`); its inputs are host facts
(the installed MXMACA versions, the node's MetaX CDI spec, the device nodes' numbers) and its one write is the
container's in-use record, which the maca agent reads (`metax_hw.sdk_store`). The record is written through a
temporary file and a rename, so a reader sees a whole record or none. No fsync: the records live under /run (a
tmpfs), which a crash or reboot empties together with every container; an fsync would only cost each GPU
container's start a disk flush on hosts whose /run is on disk.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import tempfile
from collections.abc import Sequence
from typing import Any

from metax_core import versions
from metax_core.runtime import container_edit, sdk


class HostContainerEdit:
    def __init__(
        self, host_root: pathlib.Path, sdk_dir: pathlib.Path, in_use_dir: pathlib.Path, cdi_file: pathlib.Path
    ):
        self.host_root = host_root
        self.sdk_dir = sdk_dir
        self.in_use_dir = in_use_dir
        self.cdi_file = cdi_file

    def installed(self) -> tuple[versions.Version, ...]:
        try:
            return tuple(sdk.installed(os.listdir(self.sdk_dir)))
        except FileNotFoundError:
            return ()

    def cdi_spec(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.cdi_file.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def device_info(self, paths: Sequence[str]) -> dict[str, container_edit.DeviceInfo]:
        found: dict[str, container_edit.DeviceInfo] = {}
        for path in paths:
            try:
                st = os.stat(self.host_root / path.lstrip("/"))
            except OSError:
                continue
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
            if kind is not None:
                found[path] = container_edit.DeviceInfo(kind, os.major(st.st_rdev), os.minor(st.st_rdev))
        return found

    def record_use(self, use: sdk.Use) -> None:
        path = self.in_use_dir / sdk.use_file_name(use.container_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(sdk.render_use(use))
            os.replace(tmp, path)
        except BaseException:
            pathlib.Path(tmp).unlink(missing_ok=True)
            raise

    def has_version(self, name: str) -> bool:
        return (self.sdk_dir / name).is_dir()
