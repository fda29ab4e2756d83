"""vfio-manager's part of the uninstall (R-INSTALL): every GPU back to its native driver, vfio-pci as found.

Why a module of its own: the normal round binds what ``metax-vfio-config`` selects; the undo gives every
MetaX function held for vfio-pci back (`vfio.plan` with nothing selected) and unloads ``vfio-pci`` when this
agent loaded it. That fact is recorded on the host (``/var/lib/metax/vfio-manager/loaded-vfio-pci``, an
empty marker written before the load), so a restarted agent still knows; the marker and its directory go
last, once nothing stays bound. Each step looks at the host first: an undo killed midway completes on restart.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib

from metax_core.errors import HardwareError
from metax_core.inventory import METAX_MODULE, VFIO_DRIVER
from metax_core.node import vfio
from metax_core.ports import hardware
from metax_core.spec import vfio_config

log = logging.getLogger(__name__)

STATE_DIR = "/var/lib/metax/vfio-manager"
MARKER = STATE_DIR + "/loaded-vfio-pci"


class Marker:
    """ "vfio-manager loaded vfio-pci": written before the load, removed by the undo."""

    def __init__(self, host_root: pathlib.Path) -> None:
        self.path = host_root / MARKER.lstrip("/")

    def mark(self) -> None:
        if self.path.exists():
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise HardwareError("record the vfio-pci load", str(self.path), str(exc)) from exc

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # absent, or not empty (not ours to empty)
            self.path.parent.rmdir()


def undo(
    marker: Marker,
    devices: hardware.DeviceInventory,
    binder: hardware.DriverBinder,
    modules: hardware.KernelModules,
) -> list[str]:
    """Give every GPU held for vfio-pci back; unload vfio-pci if we loaded it. Returns what stays and why."""
    kept: list[str] = []
    functions = devices.functions()
    native_loaded = modules.state(METAX_MODULE) is not None
    plan = vfio.plan(functions, vfio_config.GpuSelection(), native_loaded=native_loaded)
    for address in plan.to_native:
        try:
            binder.reset_driver(address)
        except HardwareError as exc:
            kept.append(f"{address} on vfio-pci: {exc.detail}")
    if kept:
        return kept
    if marker.path.exists():
        still = [f.address for f in devices.functions() if f.driver == VFIO_DRIVER]
        try:
            if modules.state(VFIO_DRIVER) is not None and not still:
                modules.unload(VFIO_DRIVER)
        except HardwareError as exc:
            return [f"{VFIO_DRIVER} module: {exc.detail}"]
        try:
            marker.clear()
        except OSError as exc:
            return [f"{marker.path}: {exc}"]
    return kept
