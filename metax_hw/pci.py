"""PCI inventory from sysfs: which MetaX functions exist, how they hang together, which nodes open them.

Why: the device plugin, the VFIO manager, the labeller and the topology worker all start from the same
list — PFs and VFs with their NUMA node, IOMMU group, PCIe ancestry and bound driver — and R-VFIO indexes
GPUs by sorted PCI address, so there must be exactly one reader of ``/sys/bus/pci`` and it must sort.
Everything comes from the kernel's own files; nothing is cached, so a GPU that disappears is gone on the
next call.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from metax_core import errors, inventory
from metax_core.health.faults import PcieLink
from metax_core.inventory import FunctionKind, PciAddress, PciFunction
from metax_core.wire import host
from metax_hw import sysfs

logger = logging.getLogger(__name__)

PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
"""A full PCI address as sysfs names devices (domain:bus:device.function)."""

PCI_DEVICES = "/sys/bus/pci/devices"
PCI_DRIVERS = "/sys/bus/pci/drivers"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
BRIDGE_CLASS_PREFIX = 0x0604
"""PCI class 06 (bridge), subclass 04 (PCI-to-PCI): root ports and switch ports."""

_OP = "read PCI inventory"


def is_pci_address(text: str) -> bool:
    return PCI_ADDRESS.match(text) is not None


def _virtfn_index(name: str) -> int:
    return int(name[len("virtfn") :])


class SysfsDeviceInventory:
    """`metax_core.ports.hardware.DeviceInventory` on ``<root>/sys/bus/pci``.

    Which functions are "ours" is a setting: ``vendor_id`` (MetaX's 0x9999 by default) and, optionally,
    ``device_ids`` (None: every device of that vendor; otherwise PF and VF device ids alike). The real-kernel
    tests point it at QEMU's emulated SR-IOV NVMe controller (1b36:0010), whose vendor also makes the
    machine's PCIe root ports.
    """

    def __init__(
        self,
        tree: sysfs.HostTree,
        vendor_id: int = inventory.METAX_VENDOR_ID,
        device_ids: Collection[int] | None = None,
    ) -> None:
        self.tree = tree
        self.vendor_id = vendor_id
        self.device_ids = frozenset(device_ids) if device_ids is not None else None

    def manages(self, address: PciAddress) -> bool:
        """Whether the function at ``address`` has the vendor (and device) ids this inventory manages."""
        dev = self.device_dir(address)
        if self.tree.read_int(dev / "vendor", operation=_OP, device=address) != self.vendor_id:
            return False
        if self.device_ids is None:
            return True
        return self.tree.read_int(dev / "device", operation=_OP, device=address) in self.device_ids

    def device_dir(self, address: str) -> Path:
        return self.tree.path(PCI_DEVICES) / address

    def functions(self) -> Sequence[PciFunction]:
        found: list[PciFunction] = []
        for name in self.tree.listdir(self.tree.path(PCI_DEVICES)):
            if not is_pci_address(name):
                continue
            if not self.manages(PciAddress(name)):
                continue
            function = self._read(PciAddress(name))
            if function is not None:
                found.append(function)
        return sorted(found, key=lambda f: f.address)

    def function(self, address: PciAddress) -> PciFunction:
        """One function, whatever its vendor; HardwareError when the kernel does not know it."""
        function = self._read(address)
        if function is None:
            raise errors.HardwareError(_OP, address, f"no such PCI device in {PCI_DEVICES}")
        return function

    def exists(self, address: PciAddress) -> bool:
        return self.device_dir(address).exists()

    def iommu_enabled(self) -> bool:
        return bool(self.tree.listdir(self.tree.path(IOMMU_GROUPS)))

    def iommu_group_members(self, group: int) -> Sequence[PciAddress]:
        """Every PCI function the kernel put in IOMMU group ``group`` (any vendor), sorted."""
        names = self.tree.listdir(self.tree.path(IOMMU_GROUPS) / str(group) / "devices")
        return [PciAddress(n) for n in names if is_pci_address(n)]

    def pci_class(self, address: PciAddress) -> int | None:
        return self.tree.read_int(self.device_dir(address) / "class", operation=_OP, device=address)

    def vendor(self, address: PciAddress) -> int | None:
        return self.tree.read_int(self.device_dir(address) / "vendor", operation=_OP, device=address)

    def is_bridge(self, address: PciAddress) -> bool:
        klass = self.pci_class(address)
        return klass is not None and (klass >> 8) == BRIDGE_CLASS_PREFIX

    def driver_of(self, address: PciAddress) -> str | None:
        return self.tree.link_name(self.device_dir(address) / "driver")

    def driver_loaded(self, driver: str) -> bool:
        return self.tree.path(PCI_DRIVERS).joinpath(driver).is_dir()

    def config_vendor(self, address: PciAddress) -> int | None:
        """The vendor id read live from config space: 0xffff means the device no longer answers."""
        raw = self.tree.read_bytes(
            self.device_dir(address) / "config", 2, operation="read config space", device=address
        )
        if raw is None or len(raw) < 2:
            return None
        return int.from_bytes(raw[:2], "little")

    def link(self, address: PciAddress) -> PcieLink:
        """The function's PCIe link (``current_link_speed``/``width``, ``max_link_*``; absent files give None,
        as on a VF or a virtual machine's emulated bus)."""
        directory = self.device_dir(address)

        def text(name: str) -> str | None:
            return self.tree.read(directory / name, operation="read the PCIe link", device=address)

        def number(name: str) -> int | None:
            value = (text(name) or "").strip()
            return int(value) if value.isdigit() else None

        return PcieLink(
            speed=text("current_link_speed"),
            width=number("current_link_width"),
            max_speed=text("max_link_speed"),
            max_width=number("max_link_width"),
        )

    def device_nodes(self, address: PciAddress) -> Sequence[str]:
        dev = self.device_dir(address)
        if not dev.exists():
            raise errors.HardwareError("list device nodes", address, f"no such PCI device in {PCI_DEVICES}")
        driver = self.tree.link_name(dev / "driver")
        candidates: list[str] = []
        if driver == inventory.VFIO_DRIVER:
            group = self.tree.link_name(dev / "iommu_group")
            candidates += [host.VFIO_CONTAINER]
            if group is not None:
                candidates += [f"{host.VFIO_DIR}/{group}", f"{host.VFIO_DIR}/noiommu-{group}"]
        elif driver is not None:
            for entry in self.tree.listdir(dev / "drm"):
                if entry.startswith(("card", "renderD")):
                    candidates.append(f"{host.DRI_DIR}/{entry}")
            candidates.append(host.MXCD)
        return [c for c in candidates if self.tree.path(c).exists() or self.tree.path(c).is_symlink()]

    def _read(self, address: PciAddress) -> PciFunction | None:
        dev = self.device_dir(address)
        tree = self.tree
        vendor = tree.read_int(dev / "vendor", operation=_OP, device=address)
        device = tree.read_int(dev / "device", operation=_OP, device=address)
        if vendor is None or device is None:
            return None  # removed while we looked
        physfn = tree.link_name(dev / "physfn")
        numa = tree.read_int(dev / "numa_node", operation=_OP, device=address)
        group = tree.link_name(dev / "iommu_group")
        override = tree.read(dev / "driver_override", operation=_OP, device=address)
        virtfns = sorted((e for e in tree.listdir(dev) if re.fullmatch(r"virtfn\d+", e)), key=_virtfn_index)
        vfs = tuple(PciAddress(n) for n in (tree.link_name(dev / v) for v in virtfns) if n is not None)
        return PciFunction(
            address=address,
            vendor_id=vendor,
            device_id=device,
            kind=FunctionKind.VF if physfn is not None else FunctionKind.PF,
            physfn=PciAddress(physfn) if physfn is not None else None,
            numa_node=numa if numa is not None and numa >= 0 else None,
            iommu_group=int(group) if group is not None and group.isdigit() else None,
            driver=tree.link_name(dev / "driver"),
            sriov_totalvfs=tree.read_int(dev / "sriov_totalvfs", operation=_OP, device=address) or 0,
            sriov_numvfs=tree.read_int(dev / "sriov_numvfs", operation=_OP, device=address) or 0,
            pcie_path=self._ancestry(dev),
            driver_override=override if override not in (None, "", "(null)") else None,
            vfs=vfs,
        )

    def _ancestry(self, dev: Path) -> tuple[PciAddress, ...]:
        """PCI bridges above the device, from the resolved ``/sys/devices/pci<domain>:<bus>/...`` path."""
        try:
            resolved = self.tree.resolve(dev)
        except OSError as exc:
            raise errors.HardwareError(_OP, dev.name, sysfs.describe_os_error(exc)) from exc
        parts = [p for p in resolved.relative_to(self.tree.root).parts if is_pci_address(p)]
        return tuple(PciAddress(p) for p in parts[:-1])
