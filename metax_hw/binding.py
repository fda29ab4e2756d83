"""Moving PCI functions between kernel drivers, and SR-IOV VF counts, the way the kernel documents it.

Why: binding is a sequence, and the order matters (Documentation/ABI/testing/sysfs-bus-pci):
``driver_override`` first, so nothing else grabs the device once it is free; then ``unbind`` from the current
driver; then ``drivers_probe`` (and ``bind`` to surface the driver's refusal); then read the ``driver`` link
back, because a write that succeeded proves nothing. A failed bind is rolled back to the previous driver and
override, so the host is left as it was. Before vfio-pci, the whole IOMMU group is checked: VFIO hands out
groups, not devices, and a NIC in the same group still bound to its host driver would make the GPU unusable
(or worse, usable by a VM while the host drives its group mate).
"""

from __future__ import annotations

import logging

from metax_core import errors, inventory
from metax_core.inventory import FunctionKind, PciAddress
from metax_hw import pci, sysfs

logger = logging.getLogger(__name__)

_GROUP_SAFE_DRIVERS = frozenset({inventory.VFIO_DRIVER, "pci-stub", "pcieport"})
"""Drivers a group mate may have without blocking VFIO (bridges and parked devices)."""

_CLEAR = "\n"
"""What clears ``driver_override`` (the kernel treats an empty line as "no override")."""


class SysfsDriverBinder:
    """`metax_core.ports.hardware.DriverBinder` through ``<root>/sys/bus/pci`` writes."""

    def __init__(
        self, tree: sysfs.HostTree, devices: pci.SysfsDeviceInventory, native_driver: str = inventory.METAX_MODULE
    ) -> None:
        self.tree = tree
        self.devices = devices
        self.native_driver = native_driver
        """The sysfs name of the vendor driver; compared case-insensitively (``lspci -k`` has shown ``METAX``)."""

    def is_native(self, driver: str | None) -> bool:
        return driver is not None and driver.lower() == self.native_driver.lower()

    # --- binding -------------------------------------------------------------------------------------

    def bind(self, address: PciAddress, driver: str) -> None:
        op = f"bind to {driver}"
        before = self.devices.function(address)
        if before.driver == driver:
            if before.driver_override != driver:
                # Bound but not pinned (e.g. an agent killed on its way back, after clearing the override):
                # pin it, or the next probe of this device hands it to another driver.
                self.tree.write(
                    self.devices.device_dir(address) / "driver_override", driver, operation=op, device=address
                )
            logger.debug("%s already bound to %s", address, driver)
            return
        if not self.devices.driver_loaded(driver):
            raise errors.HardwareError(
                op, address, f"driver {driver} is not loaded (no {pci.PCI_DRIVERS}/{driver}); load its module first"
            )
        if driver == inventory.VFIO_DRIVER:
            self.check_vfio_group(address)
        dev = self.devices.device_dir(address)
        try:
            self.tree.write(dev / "driver_override", driver, operation=op, device=address)
            if before.driver is not None:
                self._unbind_from(address, before.driver, op)
            self._probe(address, op)
            if self.devices.driver_of(address) is None:
                # drivers_probe does not report a probe failure; bind does, with the driver's errno.
                bind_file = self.tree.path(pci.PCI_DRIVERS) / driver / "bind"
                self.tree.write(bind_file, address, operation=op, device=address)
            now = self.devices.driver_of(address)
            if now != driver:
                raise errors.HardwareError(op, address, f"the kernel bound {now or 'no driver'} instead of {driver}")
        except errors.HardwareError as exc:
            self._roll_back(address, before.driver, before.driver_override, exc)
            raise
        logger.info("bound %s to %s (was %s)", address, driver, before.driver or "unbound")

    def unbind(self, address: PciAddress) -> None:
        op = "unbind"
        before = self.devices.function(address)
        if before.driver is not None:
            self._unbind_from(address, before.driver, op)
        if before.driver_override is not None:
            self.tree.write(self.devices.device_dir(address) / "driver_override", _CLEAR, operation=op, device=address)
        logger.info("unbound %s from %s", address, before.driver or "no driver")

    def reset_driver(self, address: PciAddress) -> str | None:
        op = "return to the default driver"
        before = self.devices.function(address)
        dev = self.devices.device_dir(address)
        if before.driver_override is not None:
            self.tree.write(dev / "driver_override", _CLEAR, operation=op, device=address)
        if before.driver is not None and not self.is_native(before.driver):
            self._unbind_from(address, before.driver, op)
        if self.devices.driver_of(address) is None:
            self._probe(address, op)
        now = self.devices.driver_of(address)
        if before.driver_override is not None and now == before.driver_override:
            raise errors.HardwareError(
                op, address, f"still bound to {now} after clearing driver_override (a new_id entry matches it?)"
            )
        logger.info("%s returned to default driver: %s (was %s)", address, now or "none", before.driver or "none")
        return now

    def check_vfio_group(self, address: PciAddress) -> None:
        """Refuse vfio-pci when the IOMMU is off or a non-MetaX, non-bridge group mate has a host driver."""
        op = f"bind to {inventory.VFIO_DRIVER}"
        if not self.devices.iommu_enabled():
            raise errors.HardwareError(
                op,
                address,
                f"the IOMMU is off ({pci.IOMMU_GROUPS} is empty): enable VT-d/AMD-Vi in the firmware and boot "
                "with intel_iommu=on or amd_iommu=on",
            )
        group = self.devices.function(address).iommu_group
        if group is None:
            raise errors.HardwareError(op, address, "the device has no IOMMU group")
        blockers: list[str] = []
        for mate in self.devices.iommu_group_members(group):
            if mate == address:
                continue
            driver = self.devices.driver_of(mate)
            if driver is None or driver in _GROUP_SAFE_DRIVERS or self.devices.is_bridge(mate):
                continue
            if self.devices.manages(mate):
                logger.warning("%s shares IOMMU group %s with %s (still on %s)", address, group, mate, driver)
                continue
            blockers.append(f"{mate} (driver {driver})")
        if blockers:
            raise errors.HardwareError(
                op,
                address,
                f"IOMMU group {group} also holds {', '.join(blockers)} bound to a host driver; VFIO assigns whole "
                "groups: unbind those devices or move the GPU to a slot with its own group",
            )

    # --- SR-IOV --------------------------------------------------------------------------------------

    def set_vf_count(self, pf: PciAddress, count: int, drivers_autoprobe: bool | None = None) -> None:
        op = "set VF count"
        function = self.devices.function(pf)
        dev = self.devices.device_dir(pf)
        if function.kind is FunctionKind.VF:
            raise errors.HardwareError(op, pf, f"is a VF of {function.physfn}; set the VF count on the PF")
        if not (dev / "sriov_totalvfs").exists():
            raise errors.HardwareError(
                op, pf, "the device has no SR-IOV capability (no sriov_totalvfs): it needs the virtualisation firmware"
            )
        if not 0 <= count <= function.sriov_totalvfs:
            raise errors.HardwareError(op, pf, f"{count} VFs asked, the device supports 0 to {function.sriov_totalvfs}")
        if function.driver is None and count != function.sriov_numvfs:
            raise errors.HardwareError(
                op,
                pf,
                "no driver is bound to the PF, and the PF driver is what creates VFs: bind it (load the "
                "metax module) first",
            )
        if drivers_autoprobe is not None:
            self.tree.write(dev / "sriov_drivers_autoprobe", "1" if drivers_autoprobe else "0", operation=op, device=pf)
        if function.sriov_numvfs == count:
            return
        numvfs = dev / "sriov_numvfs"
        if function.sriov_numvfs != 0 and count != 0:
            # The kernel refuses to change a non-zero count directly (EBUSY): go through zero.
            self.tree.write(numvfs, "0", operation=op, device=pf)
        self.tree.write(numvfs, str(count), operation=op, device=pf)
        after = self.devices.function(pf)
        if after.sriov_numvfs != count or len(after.vfs) != count:
            raise errors.HardwareError(
                op, pf, f"asked for {count} VFs, the kernel shows {after.sriov_numvfs} ({len(after.vfs)} virtfn links)"
            )
        logger.info("%s: %d VFs (was %d)", pf, count, function.sriov_numvfs)

    # --- steps ---------------------------------------------------------------------------------------

    def _unbind_from(self, address: PciAddress, driver: str, op: str) -> None:
        unbind_file = self.tree.path(pci.PCI_DRIVERS) / driver / "unbind"
        self.tree.write(unbind_file, address, operation=op, device=address)
        still = self.devices.driver_of(address)
        if still is not None:
            raise errors.HardwareError(op, address, f"still bound to {still} after unbind")

    def _probe(self, address: PciAddress, op: str) -> None:
        probe = self.tree.path("/sys/bus/pci/drivers_probe")
        self.tree.write(probe, address, operation=op, device=address)

    def _roll_back(
        self, address: PciAddress, driver: str | None, override: str | None, cause: errors.HardwareError
    ) -> None:
        """Best effort back to the previous driver and override; the original error is what the caller sees."""
        dev = self.devices.device_dir(address)
        try:
            if not self.devices.exists(address):
                return
            self.tree.write(dev / "driver_override", override or _CLEAR, operation="roll back", device=address)
            now = self.devices.driver_of(address)
            if now is not None and now != driver:
                self._unbind_from(address, now, "roll back")
            if self.devices.driver_of(address) is None and driver is not None:
                self._probe(address, "roll back")
            logger.warning(
                "bind of %s failed (%s); rolled back to %s",
                address,
                cause.detail,
                self.devices.driver_of(address) or "no driver",
            )
        except errors.HardwareError as exc:
            logger.error("bind of %s failed (%s) and the roll back failed too: %s", address, cause.detail, exc)
