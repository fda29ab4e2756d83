"""Invariants of a fake host tree: after any operation or injected fault, the fake must still be a host.

Why: "a clear error and a consistent host afterwards" is only testable if "consistent" is written down. These
are the kernel's own invariants (a driver link has its reverse link, a PF shows as many VFs as
``sriov_numvfs``, a bound native function has its /dev nodes, a loaded driver module has its driver
directory), checked from the tree alone. `audit` returns the broken ones; tests assert it is empty.
"""

from __future__ import annotations

from pathlib import Path

from metax_core.wire import host
from metax_hw_fake import layout, pcidev, state


def audit(root: Path) -> list[str]:
    problems: list[str] = []
    st = state.load(root)
    devices = layout.devices_dir(root)
    bound_native: set[str] = set()
    for entry in sorted(devices.iterdir()):
        addr = entry.name
        if not entry.exists():
            problems.append(f"{addr}: dangling /sys/bus/pci/devices link")
            continue
        driver = pcidev.driver_of(root, addr)
        if driver is not None:
            if not (layout.drivers_dir(root) / driver / addr).is_symlink():
                problems.append(f"{addr}: bound to {driver} but {driver} does not list it")
            if driver == st["native_driver"]:
                bound_native.add(addr)
                drm = [n.name for n in (entry / "drm").iterdir()] if (entry / "drm").is_dir() else []
                if not drm:
                    problems.append(f"{addr}: bound to {driver} without drm nodes")
                problems += [
                    f"{addr}: /dev/dri/{n} missing" for n in drm if not (layout.dev(root) / "dri" / n).exists()
                ]
        elif (entry / "drm").exists():
            problems.append(f"{addr}: unbound but still has drm nodes")
        numvfs = layout.get(entry / "sriov_numvfs")
        if numvfs is not None:
            virtfns = [e for e in entry.iterdir() if e.name.startswith("virtfn")]
            if int(numvfs) != len(virtfns):
                problems.append(f"{addr}: sriov_numvfs {numvfs} but {len(virtfns)} virtfn links")
            problems += [f"{addr}: {v.name} points to a missing VF" for v in virtfns if not v.exists()]
        physfn = entry / "physfn"
        if physfn.is_symlink() and not physfn.exists():
            problems.append(f"{addr}: VF of a missing PF")
    for driver_dir in sorted(layout.drivers_dir(root).iterdir()):
        for link in driver_dir.iterdir():
            if layout.PCI_ADDRESS.match(link.name) and pcidev.driver_of(root, link.name) != driver_dir.name:
                problems.append(f"{driver_dir.name} lists {link.name}, which is not bound to it")
    nodes = {n.name for n in (layout.dev(root) / "dri").iterdir()}
    expected = {n.name for a in bound_native for n in (devices / a / "drm").iterdir()}
    problems += [f"{host.DRI_DIR}/{n} belongs to no bound function" for n in sorted(nodes - expected)]
    for mod, driver in st["module_drivers"].items():
        if not (layout.module_dir(root, mod) / "initstate").exists():
            problems.append(f"module {mod} recorded as loaded but /sys/module/{mod} is gone")
        if not (layout.drivers_dir(root) / driver).is_dir():
            problems.append(f"module {mod} loaded without its driver directory {driver}")
    if (layout.dev(root) / "mxcd").exists() != (st["native_module"] in st["module_drivers"]):
        problems.append("/dev/mxcd does not match whether the driver is loaded")
    return problems
