"""vfio-manager's record that it loaded ``vfio-pci`` (`ports.node.VfioLoadMarker`): an empty file on the host.

Why a file on the host: the agent's container restarts, the kernel keeps the module; the uninstall unloads
``vfio-pci`` only when this agent loaded it, so the fact must outlive the agent. Written before the load,
removed (with its directory, when empty) by the undo once nothing stays bound.
"""

from __future__ import annotations

import contextlib
import pathlib

from metax_core.errors import HardwareError

STATE_DIR = "/var/lib/metax/vfio-manager"
MARKER = STATE_DIR + "/loaded-vfio-pci"


class HostVfioMarker:
    def __init__(self, host_root: pathlib.Path) -> None:
        self.path = host_root / MARKER.lstrip("/")

    def present(self) -> bool:
        return self.path.exists()

    def mark(self) -> None:
        if self.path.exists():
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise HardwareError("record the vfio-pci load", str(self.path), str(exc)) from exc

    def clear(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise HardwareError("remove the vfio-pci load record", str(self.path), str(exc)) from exc
        with contextlib.suppress(OSError):  # absent, or not empty (not ours to empty)
            self.path.parent.rmdir()
