"""driver-manager's part of the uninstall (R-INSTALL): the first-touch record, and the way back to it.

Why a module of its own: the normal round changes the host (payload copies, module loads, VF counts,
firmware copies); this module remembers the host as it was before the first of those changes
(`metax_core.node.uninstall.Baseline`, written once at ``/var/lib/metax/driver-manager/baseline.json``
before the first round acts) and, when the finalizer asks, brings it back: VF counts, the ``metax``
module and its parameters (`uninstall.undo_driver` decides), then removes every file and directory it added
under `uninstall.OWNED_DIRS` (the baseline lists what was there before), its state and the baseline last.
Each step looks at the host first, so an undo killed midway completes on restart from the same record.
Flashed firmware is not undone: it is in the GPU's flash, not a file, and flashing the old image back is a
new firmware upgrade an administrator decides (docs/operator.md, "Uninstall").
"""

from __future__ import annotations

import logging

from metax_core.errors import HardwareError
from metax_core.inventory import METAX_MODULE
from metax_core.node import uninstall
from metax_core.ports import hardware
from metax_core.ports import node as node_ports

log = logging.getLogger(__name__)


def record_first_touch(
    baseline_file: node_ports.DriverBaselineStore, modules: hardware.KernelModules, devices: hardware.DeviceInventory
) -> None:
    """Write the baseline unless it exists (the first round, before any host change)."""
    if baseline_file.exists():
        return
    paths = baseline_file.owned_paths()
    baseline_file.write(uninstall.baseline_of(modules.state(METAX_MODULE), devices.functions(), paths))
    log.info("recorded the host before install")


def undo(
    baseline_file: node_ports.DriverBaselineStore,
    modules: hardware.KernelModules,
    binder: hardware.DriverBinder,
    devices: hardware.DeviceInventory,
) -> list[str]:
    """Bring the host back to the baseline; returns what stays and why (empty: as found)."""
    kept: list[str] = []
    baseline = baseline_file.read()
    if baseline is not None:
        plan = uninstall.undo_driver(baseline, modules.state(METAX_MODULE), devices.functions())
        try:
            for write in plan.before_module:
                binder.set_vf_count(write.pf, write.count)
            if plan.module is uninstall.ModuleStep.UNLOAD:
                modules.unload(METAX_MODULE)
            elif plan.module is uninstall.ModuleStep.RELOAD_HOST:
                modules.unload(METAX_MODULE)
                modules.load(METAX_MODULE, plan.params)
            elif plan.module is uninstall.ModuleStep.LOAD_HOST:
                modules.load(METAX_MODULE, plan.params)
            for write in plan.after_module:
                binder.set_vf_count(write.pf, write.count)
        except HardwareError as exc:
            kept.append(f"metax module and VF counts: {exc}")
            log.error("cannot restore the host's driver: %s", exc)
        if not plan.nothing and not kept:
            log.info("restored the host's driver: %s", plan.module.value)
    before = baseline.files if baseline is not None else tuple(baseline_file.owned_paths())
    added = uninstall.leftovers(before, baseline_file.owned_paths())
    state_dir = uninstall.OWNED_DIRS[-1]
    kept += baseline_file.remove([p for p in added if not _under(p, state_dir)])
    if not kept:  # the state and the record go last: an undo that failed is tried again from the record
        kept += baseline_file.remove([p for p in added if _under(p, state_dir)])
    return kept


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")
