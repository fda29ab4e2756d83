"""vfio-manager's part of the uninstall (R-INSTALL): every GPU back to its native driver, vfio-pci as found.

Why a module of its own: the normal round binds what ``metax-vfio-config`` selects; the undo gives every
MetaX function held for vfio-pci back (`vfio.plan` with nothing selected) and unloads ``vfio-pci`` when this
agent loaded it. That fact is recorded on the host (`metax_hw.vfio_marker`, an empty marker written before
the load), so a restarted agent still knows; the marker and its directory go
last, once nothing stays bound. Each step looks at the host first: an undo killed midway completes on restart.
"""

from __future__ import annotations

import logging

from metax_core.errors import HardwareError
from metax_core.inventory import METAX_MODULE, VFIO_DRIVER
from metax_core.node import vfio
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.spec import vfio_config

log = logging.getLogger(__name__)


def undo(
    marker: node_ports.VfioLoadMarker,
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
    if marker.present():
        still = [f.address for f in devices.functions() if f.driver == VFIO_DRIVER]
        try:
            if modules.state(VFIO_DRIVER) is not None and not still:
                modules.unload(VFIO_DRIVER)
        except HardwareError as exc:
            return [f"{VFIO_DRIVER} module: {exc.detail}"]
        try:
            marker.clear()
        except HardwareError as exc:
            return [f"{exc.device}: {exc.detail}"]
    return kept
