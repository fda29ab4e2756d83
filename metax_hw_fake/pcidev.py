"""The fake kernel's PCI core: devices, driver binding and SR-IOV, acting on the tree under the root.

Why: these are the kernel behaviours the real adapter's sequences depend on, reproduced with the kernel's
own rules and errnos (drivers/pci/pci-driver.c, pci-sysfs.c, iov.c): ``bind`` of a bound device is EBUSY,
``unbind`` of an unbound one ENODEV, ``drivers_probe`` says nothing when no driver wants the device,
``driver_override`` restricts probing to one driver, changing a non-zero ``sriov_numvfs`` is EBUSY, more than
``sriov_totalvfs`` is ERANGE, a PF without a driver cannot make VFs (ENOENT), and a PF leaving its driver
takes its VFs with it. As Debian's kernel showed under QEMU (tests/realkernel): VFs sit at the PF's routing
id + ``sriov_offset`` + i * ``sriov_stride``, and a VF of a PF whose ``sriov_drivers_autoprobe`` is 0 is
probed by no driver (drivers_probe, a driver's ``bind`` or a driver arriving) unless ``driver_override`` names
one (``pci_device_can_probe``). Standard library only (the fake tools import it).
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path
from typing import Any

from metax_hw_fake import layout

State = dict[str, Any]
VFIO = "vfio-pci"


def oserror(code: int, path: Path | str | None = None) -> OSError:
    return OSError(code, os.strerror(code), str(path) if path is not None else None)


def device_dir(root: Path, addr: str) -> Path:
    """The device's real directory under ``<root>/sys/devices`` (ENODEV when the kernel has no such device)."""
    link = layout.devices_dir(root) / addr
    if not link.exists():
        raise oserror(errno.ENODEV, link)
    return layout.real_dir(root, link)


def exists(root: Path, addr: str) -> bool:
    return (layout.devices_dir(root) / addr).exists()


def driver_of(root: Path, addr: str) -> str | None:
    return layout.link_name(layout.devices_dir(root) / addr / "driver")


def override_of(root: Path, addr: str) -> str | None:
    value = layout.get(layout.devices_dir(root) / addr / "driver_override")
    return None if value in (None, "", "(null)") else value


def ids_of(root: Path, addr: str) -> tuple[int, int, int]:
    base = layout.devices_dir(root) / addr
    return (
        int(layout.get(base / "vendor") or "0", 16),
        int(layout.get(base / "device") or "0", 16),
        int(layout.get(base / "class") or "0", 16),
    )


def config_space(vendor: int, device: int, klass: int) -> bytes:
    head = vendor.to_bytes(2, "little") + device.to_bytes(2, "little") + bytes(4)
    head += (klass << 8).to_bytes(4, "little")
    return head + bytes(64 - len(head))


def new_group(root: Path, st: State, path: Path) -> int | None:
    if not st["iommu"]:
        return None
    group = int(st["next_group"])
    st["next_group"] = group + 1
    join_group(root, group, path)
    return group


def join_group(root: Path, group: int, path: Path) -> None:
    group_dir = layout.iommu_groups(root) / str(group)
    (group_dir / "devices").mkdir(parents=True, exist_ok=True)
    layout.relink(group_dir / "devices" / path.name, path)
    layout.relink(path / "iommu_group", group_dir)


FULL_LINK: dict[str, str] = {
    "current_link_speed": "32.0 GT/s PCIe",
    "max_link_speed": "32.0 GT/s PCIe",
    "current_link_width": "16",
    "max_link_width": "16",
}
"""A GPU's PCIe link as the kernel shows it when it trained at its best (Gen5 x16)."""


def create_function(
    root: Path,
    st: State,
    parent: Path,
    addr: str,
    vendor: int,
    device: int,
    klass: int,
    numa: int,
    group: int | None = None,
    extra: dict[str, str] | None = None,
) -> Path:
    """A PCI function directory under ``parent`` (a real directory), linked from /sys/bus/pci/devices."""
    path = parent / addr
    path.mkdir(parents=True)
    layout.put(path / "vendor", f"0x{vendor:04x}")
    layout.put(path / "device", f"0x{device:04x}")
    layout.put(path / "class", f"0x{klass:06x}")
    layout.put(path / "subsystem_vendor", f"0x{vendor:04x}")
    layout.put(path / "subsystem_device", "0x0000")
    layout.put(path / "revision", "0x01")
    layout.put(path / "numa_node", str(numa))
    layout.put(path / "driver_override", "(null)")
    layout.put(path / "enable", "1")
    layout.put(path / "config", config_space(vendor, device, klass))
    for name, value in (extra or {}).items():
        layout.put(path / name, value)
    layout.relink(layout.devices_dir(root) / addr, path)
    if group is not None and st["iommu"]:
        join_group(root, group, path)
    else:
        new_group(root, st, path)
    return path


def remove_function(root: Path, st: State, addr: str) -> None:
    """Hot removal (``remove`` attribute, surprise removal): unbind, drop VFs, links and the directory."""
    path = device_dir(root, addr)
    if driver_of(root, addr) is not None:
        unbind(root, st, addr)
    if (path / "sriov_numvfs").exists():
        _remove_vfs(root, st, addr)
    group = layout.link_name(path / "iommu_group")
    if group is not None:
        group_dir = layout.iommu_groups(root) / group
        layout.unlink(group_dir / "devices" / addr)
        if not any((group_dir / "devices").iterdir()):
            layout.unlink(group_dir)
    layout.unlink(layout.devices_dir(root) / addr)
    layout.unlink(path)
    st["gpus"].pop(addr, None)


def driver_loaded(root: Path, driver: str) -> bool:
    return (layout.drivers_dir(root) / driver).is_dir()


def claims(root: Path, st: State, driver: str, addr: str) -> bool:
    """Whether ``driver``'s id table (or new_id entries) matches the device."""
    vendor, device, _ = ids_of(root, addr)
    for want_vendor, want_device in st["driver_ids"].get(driver, []):
        if want_vendor == vendor and want_device in (-1, device):
            return True
    return False


def can_probe(root: Path, addr: str) -> bool:
    """``pci_device_can_probe``: a PF, a VF whose PF autoprobes, or a VF with a driver_override."""
    physfn = layout.devices_dir(root) / addr / "physfn"
    if not physfn.is_symlink():
        return True
    return layout.get(physfn / "sriov_drivers_autoprobe") != "0" or override_of(root, addr) is not None


def check_bind_faults(root: Path, st: State, addr: str, driver: str) -> None:
    if addr in st["faults"]["fallen"]:
        raise oserror(errno.ENODEV)
    refusal = st["faults"]["bind_refused"].get(addr)
    if refusal is not None and refusal["driver"] in ("*", driver):
        raise oserror(int(refusal["errno"]))


def bind(root: Path, st: State, addr: str, driver: str) -> None:
    """``drivers/<driver>/bind`` in the kernel's order: ENODEV when the driver does not match the device (its
    id table, or a driver_override naming another driver), then EBUSY when bound, then ENODEV when the device
    may not be probed."""
    device_dir(root, addr)
    override = override_of(root, addr)
    if override is not None and override != driver:
        raise oserror(errno.ENODEV)
    if override is None and not claims(root, st, driver, addr):
        raise oserror(errno.ENODEV)
    if driver_of(root, addr) is not None:
        raise oserror(errno.EBUSY)
    if not can_probe(root, addr):
        raise oserror(errno.ENODEV)
    check_bind_faults(root, st, addr, driver)
    attach(root, st, addr, driver)


def attach(root: Path, st: State, addr: str, driver: str) -> None:
    path = device_dir(root, addr)
    driver_dir = layout.drivers_dir(root) / driver
    layout.relink(path / "driver", driver_dir)
    layout.relink(driver_dir / addr, path)
    if driver == st["native_driver"]:
        # The lowest free minor, as the kernel's DRM core allocates them (drm_minor_alloc: xa_alloc over the
        # minor range): a driver reloaded after an unload gets card0 again, not card<n+1>.
        used = {p.name for p in (layout.dev(root) / "dri").glob("card*")}
        card = next(i for i in itertools.count() if f"card{i}" not in used)
        for node in (f"card{card}", f"renderD{128 + card}"):
            (path / "drm" / node).mkdir(parents=True)
            layout.put(layout.dev(root) / "dri" / node, f"fake char device for {addr}")
    elif driver == VFIO:
        group = layout.link_name(path / "iommu_group")
        if group is not None:
            layout.put(layout.dev(root) / "vfio" / group, f"fake vfio group {group}")


def unbind(root: Path, st: State, addr: str, driver: str | None = None) -> None:
    """``drivers/<driver>/unbind`` (ENODEV unless bound to it); a PF's VFs go with it unless the host was built
    with a driver that leaves SR-IOV enabled on remove (the kernel then only warns)."""
    path = device_dir(root, addr)
    current = driver_of(root, addr)
    if current is None or (driver is not None and current != driver):
        raise oserror(errno.ENODEV)
    if (
        (path / "sriov_numvfs").exists()
        and int(layout.get(path / "sriov_numvfs") or "0")
        and not st.get("driver_leaves_vfs", False)
    ):
        _remove_vfs(root, st, addr)  # the driver's remove() disables SR-IOV (igb does; nvme does not)
    for node in sorted((path / "drm").iterdir()) if (path / "drm").is_dir() else []:
        layout.unlink(layout.dev(root) / "dri" / node.name)
    layout.unlink(path / "drm")
    layout.unlink(path / "driver")
    layout.unlink(layout.drivers_dir(root) / current / addr)
    if current == VFIO:
        group = layout.link_name(path / "iommu_group")
        if group is not None and not any(
            driver_of(root, mate.name) == VFIO for mate in (layout.iommu_groups(root) / group / "devices").iterdir()
        ):
            layout.unlink(layout.dev(root) / "vfio" / group)


def probe(root: Path, st: State, addr: str) -> None:
    """``drivers_probe``: bind the override driver, or the first driver whose table matches; silent otherwise."""
    device_dir(root, addr)
    if driver_of(root, addr) is not None or not can_probe(root, addr):
        return
    override = override_of(root, addr)
    candidates = [override] if override is not None else sorted(st["driver_ids"])
    for driver in candidates:
        if not driver_loaded(root, driver):
            continue
        if override is None and not claims(root, st, driver, addr):
            continue
        try:
            check_bind_faults(root, st, addr, driver)
        except OSError:
            return  # the probe failed: the kernel logs it and the device stays unbound
        attach(root, st, addr, driver)
        return


def set_override(root: Path, addr: str, value: str) -> None:
    name = value.strip()
    if len(name) >= 4096:
        raise oserror(errno.EINVAL)
    layout.put(device_dir(root, addr) / "driver_override", name or "(null)")


def set_numvfs(root: Path, st: State, pf: str, value: str) -> None:
    """``sriov_numvfs`` with the kernel's checks, in the kernel's order."""
    path = device_dir(root, pf)
    if not (path / "sriov_totalvfs").exists():
        raise oserror(errno.EACCES)
    try:
        count = int(value.strip(), 0)
    except ValueError:
        raise oserror(errno.EINVAL) from None
    if count < 0:
        raise oserror(errno.EINVAL)
    if count > int(layout.get(path / "sriov_totalvfs") or "0"):
        raise oserror(errno.ERANGE)
    current = int(layout.get(path / "sriov_numvfs") or "0")
    if count == current:
        return
    if driver_of(root, pf) != st["native_driver"]:
        raise oserror(errno.ENOENT)
    if count == 0:
        _remove_vfs(root, st, pf)
        return
    if current:
        raise oserror(errno.EBUSY)
    _create_vfs(root, st, pf, count)


def vf_address(pf: str, index: int, offset: int, stride: int) -> str:
    """VF ``index``'s address: routing id (bus << 8 | devfn) of the PF + offset + index * stride."""
    domain, bus_no, device, function = layout.split_address(pf)
    rid = (bus_no << 8 | device << 3 | function) + offset + index * stride
    return layout.address(domain, rid >> 8, (rid & 0xFF) >> 3, rid & 7)


def _vf_address(root: Path, pf: str, index: int) -> str:
    path = layout.devices_dir(root) / pf
    return vf_address(
        pf, index, int(layout.get(path / "sriov_offset") or "1"), int(layout.get(path / "sriov_stride") or "1")
    )


def _create_vfs(root: Path, st: State, pf: str, count: int) -> None:
    path = device_dir(root, pf)
    vendor, _, klass = ids_of(root, pf)
    vf_device = int(st["sriov"][pf]["vf_device_id"])
    numa = int(layout.get(path / "numa_node") or "-1")
    for index in range(count):
        vf = _vf_address(root, pf, index)
        vf_path = create_function(root, st, path.parent, vf, vendor, vf_device, klass, numa)
        layout.relink(vf_path / "physfn", path)
        layout.relink(path / f"virtfn{index}", vf_path)
    layout.put(path / "sriov_numvfs", str(count))
    if layout.get(path / "sriov_drivers_autoprobe") == "1":
        for index in range(count):
            probe(root, st, _vf_address(root, pf, index))


def _remove_vfs(root: Path, st: State, pf: str) -> None:
    path = device_dir(root, pf)
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("virtfn"):
            vf = layout.link_name(entry)
            if vf is not None and exists(root, vf):
                remove_function(root, st, vf)
            layout.unlink(entry)
    layout.put(path / "sriov_numvfs", "0")
