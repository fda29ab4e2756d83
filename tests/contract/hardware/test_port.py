"""Contract of the hardware port, run against the fake host and (read-only) against this machine's sysfs.

Aspects covered:
- inventory: sorted, unique, every field equal to what sysfs itself says (read here independently with
  os.readlink/open), PF/VF links consistent, PCIe ancestry made of real bridges, IOMMU state, device nodes
  exist and are host-absolute, vendor filtering; on the fake and on this kernel's /sys/bus/pci;
- network interfaces: the link list and PCI placement agree with /sys/class/net (pyroute2 on this machine);
- driver binding (fake): vfio-pci and back, unbind, refusal when the driver is absent;
- SR-IOV (fake): enable, change through zero, autoprobe off, bounds;
- kernel modules (fake): load with params and read back, installed version, unload, payload insmod,
  unknown parameter and "already loaded with other parameters" refused with a clear error;
- monitor and firmware (fake): health, metrics, links, processes, VBIOS, flashing.
Every mutation ends with the fake host's invariants checked (`FakeHost.audit`).
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from metax_core import errors, inventory
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import FunctionKind, PciAddress
from metax_hw import host, pci
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost


def _local_vendor() -> int:
    """The most common PCI vendor on this machine (virtio's 0x1af4 on the CI VM)."""
    vendors = collections.Counter(
        int(Path("/sys/bus/pci/devices", d, "vendor").read_text(), 16) for d in os.listdir("/sys/bus/pci/devices")
    )
    return vendors.most_common(1)[0][0] if vendors else inventory.METAX_VENDOR_ID


@attrs.frozen
class Backend:
    name: str
    hw: host.Host
    vendor_id: int

    @property
    def root(self) -> Path:
        return self.hw.root


def _fake(tmp_path: Path) -> FakeHost:
    return (
        builder.FakeHostBuilder()
        .gpus(4, numa_nodes=2, switches=2)
        .nics(builder.NicSpec("ens1", switch=0))
        .vfs(2)
        .build(tmp_path / "host")
    )


@pytest.fixture(params=["fake", "this-machine"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "fake":
        fake = _fake(tmp_path)
        yield Backend("fake", fake.hw, inventory.METAX_VENDOR_ID)
        assert fake.audit() == []
    else:
        vendor = _local_vendor()
        yield Backend("this-machine", host.open_host("/", vendor_id=vendor), vendor)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHost]:
    fake = builder.FakeHostBuilder().gpus(4).firmware_image("1.14.0.0").payload_driver("2.19.1").build(tmp_path / "h")
    yield fake
    assert fake.audit() == []


def _raw(root: Path, address: str, attribute: str) -> str | None:
    try:
        return (root / "sys/bus/pci/devices" / address / attribute).read_text().strip()
    except FileNotFoundError:
        return None


def _link(root: Path, address: str, attribute: str) -> str | None:
    try:
        return os.path.basename(os.readlink(root / "sys/bus/pci/devices" / address / attribute))
    except FileNotFoundError:
        return None


# --- inventory, both backends ---------------------------------------------------------------------------


def test_functions_are_the_vendors_devices_sorted_by_address(backend: Backend) -> None:
    functions = backend.hw.devices.functions()
    addresses = [f.address for f in functions]
    expected = sorted(
        a
        for a in os.listdir(backend.root / "sys/bus/pci/devices")
        if int(_raw(backend.root, a, "vendor") or "0", 16) == backend.vendor_id
    )
    assert addresses == expected
    assert len(set(addresses)) == len(addresses)
    assert all(pci.is_pci_address(a) for a in addresses)


def test_every_field_matches_sysfs(backend: Backend) -> None:
    for f in backend.hw.devices.functions():
        raw_numa = int(_raw(backend.root, f.address, "numa_node") or "-1")
        assert f.vendor_id == backend.vendor_id
        assert f.device_id == int(_raw(backend.root, f.address, "device") or "", 16)
        assert f.driver == _link(backend.root, f.address, "driver")
        assert f.numa_node == (raw_numa if raw_numa >= 0 else None)
        group = _link(backend.root, f.address, "iommu_group")
        assert f.iommu_group == (int(group) if group else None)
        assert f.sriov_totalvfs == int(_raw(backend.root, f.address, "sriov_totalvfs") or "0")
        assert (f.kind is FunctionKind.VF) == (_link(backend.root, f.address, "physfn") is not None)
        assert backend.hw.devices.config_vendor(f.address) == backend.vendor_id  # live config space


def test_pf_and_vf_links_agree(backend: Backend) -> None:
    functions = {f.address: f for f in backend.hw.devices.functions()}
    for f in functions.values():
        if f.kind is FunctionKind.VF:
            assert f.physfn in functions and f.address in functions[PciAddress(str(f.physfn))].vfs
        assert len(f.vfs) == f.sriov_numvfs
        assert all(functions[v].physfn == f.address for v in f.vfs)
    if backend.name == "fake":
        assert sum(f.kind is FunctionKind.VF for f in functions.values()) == 8


def test_pcie_ancestry_is_real_bridges_root_first(backend: Backend) -> None:
    for f in backend.hw.devices.functions():
        resolved = os.path.realpath(backend.root / "sys/bus/pci/devices" / f.address)
        assert list(f.pcie_path) == [p for p in resolved.split("/") if pci.is_pci_address(p)][:-1]
        for bridge in f.pcie_path:
            assert backend.hw.devices.is_bridge(bridge)
    if backend.name == "fake":
        gpus = [f for f in backend.hw.devices.functions() if f.kind is FunctionKind.PF]
        assert gpus[0].pcie_path[:2] == gpus[1].pcie_path[:2] != gpus[2].pcie_path[:2]  # two per switch


def test_iommu_state_is_the_kernels(backend: Backend) -> None:
    groups = backend.root / "sys/kernel/iommu_groups"
    assert backend.hw.devices.iommu_enabled() == bool(groups.is_dir() and os.listdir(groups))


def test_device_nodes_exist_and_are_host_paths(backend: Backend) -> None:
    for f in backend.hw.devices.functions():
        nodes = backend.hw.devices.device_nodes(f.address)
        assert all(n.startswith("/dev/") and (backend.root / n.lstrip("/")).exists() for n in nodes)
        if backend.name == "fake" and f.driver == "metax":
            assert {n.split("/")[-1][:4] for n in nodes} == {"card", "rend", "mxcd"}


def test_another_vendor_id_finds_none_of_them(backend: Backend) -> None:
    other = pci.SysfsDeviceInventory(backend.hw.tree, vendor_id=0xDEAD)
    assert other.functions() == []
    with pytest.raises(errors.HardwareError, match="no such PCI device"):
        backend.hw.devices.device_nodes(PciAddress("0000:ff:1f.7"))


def test_device_ids_narrow_the_vendors_functions(backend: Backend) -> None:
    functions = backend.hw.devices.functions()
    if not functions:
        return
    first = functions[0].device_id
    narrowed = host.open_host(backend.root, vendor_id=backend.vendor_id, device_ids=[first]).devices
    assert [f.address for f in narrowed.functions()] == [f.address for f in functions if f.device_id == first]
    assert narrowed.manages(functions[0].address)
    assert pci.SysfsDeviceInventory(backend.hw.tree, backend.vendor_id, device_ids=[]).functions() == []


def test_network_interfaces_match_sys_class_net(backend: Backend) -> None:
    interfaces = backend.hw.network.interfaces()
    names = [i.name for i in interfaces]
    assert names == sorted(names)
    assert set(names) == set(os.listdir(backend.root / "sys/class/net"))
    for interface in interfaces:
        device = backend.root / "sys/class/net" / interface.name / "device"
        if device.exists():
            addresses = [p for p in os.path.realpath(device).split("/") if pci.is_pci_address(p)]
            assert interface.pci_address == addresses[-1]
            assert list(interface.pcie_path) == addresses[:-1]
        else:
            assert interface.pci_address is None
    if backend.name == "fake":
        nic = next(i for i in interfaces if i.name == "ens1")
        gpu0 = backend.hw.devices.functions()[0]
        assert nic.numa_node == gpu0.numa_node and nic.up


# --- binding, fake ---------------------------------------------------------------------------------------


def test_bind_to_vfio_and_back(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[1]
    with pytest.raises(errors.HardwareError, match="vfio-pci is not loaded"):
        fake.binder.bind(gpu, "vfio-pci")
    fake.modules.load("vfio-pci", {})
    fake.binder.bind(gpu, "vfio-pci")
    f = fake.devices.function(gpu)
    assert (f.driver, f.driver_override) == ("vfio-pci", "vfio-pci")
    assert f"/dev/vfio/{f.iommu_group}" in fake.devices.device_nodes(gpu)
    assert not any(n.startswith("/dev/dri") for n in fake.devices.device_nodes(gpu))
    fake.binder.bind(gpu, "vfio-pci")  # idempotent
    assert fake.binder.reset_driver(gpu) == "metax"
    assert (fake.driver_of(gpu), fake.override_of(gpu)) == ("metax", None)


def test_unbind_leaves_the_function_free(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[0]
    fake.binder.unbind(gpu)
    assert fake.devices.function(gpu).driver is None
    assert fake.devices.device_nodes(gpu) == []
    assert fake.binder.reset_driver(gpu) == "metax"


# --- SR-IOV, fake ----------------------------------------------------------------------------------------


def test_vf_count_goes_through_zero_and_vfs_follow_autoprobe(fake: FakeHost) -> None:
    pf = fake.gpu_addresses()[0]
    fake.binder.set_vf_count(pf, 4)
    vfs = fake.devices.function(pf).vfs
    assert len(vfs) == 4 and all(fake.driver_of(v) == "metax" for v in vfs)
    fake.binder.set_vf_count(pf, 2, drivers_autoprobe=False)
    vfs = fake.devices.function(pf).vfs
    assert len(vfs) == 2 and all(fake.driver_of(v) is None for v in vfs)
    with pytest.raises(errors.HardwareError, match="is a VF of"):
        fake.binder.set_vf_count(vfs[0], 1)
    with pytest.raises(errors.HardwareError, match="supports 0 to 16"):
        fake.binder.set_vf_count(pf, 17)
    fake.binder.set_vf_count(pf, 0)
    assert fake.vfs_of(pf) == []


def test_vfs_need_a_driver_on_the_pf(fake: FakeHost) -> None:
    pf = fake.gpu_addresses()[0]
    fake.binder.unbind(pf)
    with pytest.raises(errors.HardwareError, match="no driver is bound to the PF"):
        fake.binder.set_vf_count(pf, 2)
    fake.binder.reset_driver(pf)


# --- modules, fake ---------------------------------------------------------------------------------------


def test_module_reload_with_params_reads_back(fake: FakeHost) -> None:
    assert fake.modules.installed_version("metax") == "2.18.0"
    assert set(fake.modules.supported_params("metax")) == {"xcore_page_size", "gpu_model"}
    fake.modules.unload("metax")
    assert fake.modules.state("metax") is None
    assert all(fake.driver_of(g) is None for g in fake.gpu_addresses())
    fake.modules.load("metax", {"xcore_page_size": "12"})
    state = fake.modules.state("metax")
    assert state is not None and state.version == "2.18.0" and state.params["xcore_page_size"] == "12"
    assert fake.module_params("metax") == {"gpu_model": "0", "xcore_page_size": "12"}
    assert all(fake.driver_of(g) == "metax" for g in fake.gpu_addresses())


def test_loaded_module_keeps_its_parameters(fake: FakeHost) -> None:
    with pytest.raises(errors.HardwareError, match="xcore_page_size is 10 after loading, 12 was asked"):
        fake.modules.load("metax", {"xcore_page_size": "12"})


def test_unknown_parameter_is_named(fake: FakeHost) -> None:
    fake.modules.unload("metax")
    with pytest.raises(errors.HardwareError, match="no parameter page_colour"):
        fake.modules.load("metax", {"page_colour": "blue"})
    assert "metax: unknown parameter 'page_colour' ignored" in fake.dmesg()
    with pytest.raises(errors.HardwareError, match="contains spaces"):
        fake.modules.load("metax", {"gpu_model": "a b"})


def test_payload_module_file(fake: FakeHost) -> None:
    path = "/var/lib/metax/drivers/2.19.1/metax.ko"
    assert fake.modules.modinfo(path)["version"] == ["2.19.1"]
    with pytest.raises(errors.HardwareError, match="already loaded"):
        fake.modules.load_file(path, {})
    fake.modules.unload("metax")
    fake.modules.load_file(path, {"xcore_page_size": "11"})
    state = fake.modules.state("metax")
    assert state is not None and (state.version, state.params["xcore_page_size"]) == ("2.19.1", "11")
    fake.modules.unload("metax")
    with pytest.raises(errors.HardwareError, match="No such file or directory"):
        fake.modules.load_file("/var/lib/metax/drivers/9.9.9/metax.ko", {})
    assert fake.modules.state("metax") is None


def test_unloading_an_absent_module_is_a_no_op(fake: FakeHost) -> None:
    assert fake.modules.state("vfio-pci") is None
    fake.modules.unload("vfio-pci")


# --- monitor and firmware, fake --------------------------------------------------------------------------


def test_health_metrics_links_processes(fake: FakeHost) -> None:
    gpus = fake.gpu_addresses()
    assert all(h.healthy for h in fake.monitor.health().values())
    metrics = fake.monitor.metrics()
    assert [m.address for m in metrics] == gpus and metrics[0].memory_total_bytes == 65536 * 2**20
    assert metrics[0].power_milliwatts == 57000 and metrics[0].temperature_celsius == 35
    links = fake.monitor.links()
    assert len(links) == 6 and {link.kind for link in links} == {inventory.LinkKind.PIX, inventory.LinkKind.SYS}
    fake.add_process(gpus[2], 4242, "python3", 2048)
    assert [(p.address, p.pid) for p in fake.monitor.processes()] == [(gpus[2], 4242)]
    fake.set_gpu(gpus[3], state="Unavailable")
    assert fake.monitor.health()[gpus[3]].faults == (Fault(FaultKind.STATE, "mx-smi reports GPU-State Unavailable"),)


def test_firmware_versions_and_flash(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[0]
    info = fake.firmware.info()
    assert [(i.vbios_version, i.virtualization) for i in info] == [("1.13.0.0", True)] * 4
    image = "/lib/firmware/metax/c500/mxvbios-1.14.0.0.bin"
    fake.firmware.flash(gpu, image)
    assert fake.vbios(gpu) == ("1.13.0.0", "1.14.0.0")
    assert fake.reboot_firmware() == [gpu]
    assert fake.firmware.info()[0].vbios_version == "1.14.0.0"
    with pytest.raises(errors.HardwareError, match="does not exist on the host"):
        fake.firmware.flash(gpu, "/lib/firmware/metax/c500/missing.bin")


def test_no_driver_means_no_tool_calls(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(2).host_driver(None).build(tmp_path / "h")
    assert fake.modules.installed_version("metax") is None
    with pytest.raises(errors.HardwareError, match=re.escape("Module metax not found in directory /lib/modules")):
        fake.modules.load("metax", {})
    assert [[f.kind for f in h.faults] for h in fake.monitor.health().values()] == [[FaultKind.NO_DRIVER]] * 2
    assert fake.monitor.metrics() == [] and fake.firmware.info() == [] and fake.monitor.links() == []
    assert fake.audit() == []
