"""Injected hardware faults: each one gives a clear HardwareError and leaves a consistent host.

Aspects covered: GPU fallen off the bus (still enumerated, or removed), bind refused by the driver (EBUSY)
with roll back, module load failure, a module built for another kernel (Invalid module format),
module in use (flag or GPU processes), mx-smi hanging (bounded by the
timeout), printing garbage or failing, firmware flash failure, IOMMU off, a foreign device in the GPU's IOMMU
group. After every fault the fake host's invariants hold (fixture) and the state is asserted here.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from metax_core import errors
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import PciAddress
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost


def test_fallen_gpu_is_unhealthy_and_cannot_be_bound(fake: FakeHost) -> None:
    gpu, other = fake.gpu_addresses()[:2]
    fake.binder.set_vf_count(gpu, 2)
    vfs = fake.vfs_of(gpu)
    fake.fall_off_bus(gpu)
    health = fake.monitor.health()
    for function in [gpu, *vfs]:
        assert health[function].faults == (Fault(FaultKind.FELL_OFF_BUS, "config space reads 0xffff"),)
    assert health[other].healthy
    assert gpu in [f.address for f in fake.devices.functions()]
    assert gpu not in [m.address for m in fake.monitor.metrics()]
    fake.binder.unbind(gpu)
    with pytest.raises(errors.HardwareError, match=r"bind to metax on .* No such device \(ENODEV\)"):
        fake.binder.bind(gpu, "metax")
    assert fake.driver_of(gpu) is None and fake.override_of(gpu) is None


def test_removed_gpu_disappears(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[0]
    fake.binder.set_vf_count(gpu, 2)
    fake.fall_off_bus(gpu, removed=True)
    assert gpu not in [f.address for f in fake.devices.functions()]
    assert len(fake.devices.functions()) == 3
    assert gpu not in fake.monitor.health()
    with pytest.raises(errors.HardwareError, match="no such PCI device"):
        fake.binder.bind(gpu, "vfio-pci")


def test_bind_refused_rolls_back_to_the_previous_driver(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[1]
    fake.refuse_bind(gpu, "vfio-pci", errno.EBUSY)
    with pytest.raises(
        errors.HardwareError,
        match=r"bind to vfio-pci on .*: writing .* to /sys/bus/pci/drivers/"
        r"vfio-pci/bind: Device or resource busy \(EBUSY\)",
    ):
        fake.binder.bind(gpu, "vfio-pci")
    assert (fake.driver_of(gpu), fake.override_of(gpu)) == ("metax", None)
    fake.clear_faults()
    fake.binder.bind(gpu, "vfio-pci")
    assert fake.driver_of(gpu) == "vfio-pci"


def test_module_load_failure(fake: FakeHost) -> None:
    fake.modules.unload("metax")
    fake.fail_module_load("metax", "Unknown symbol in module")
    with pytest.raises(
        errors.HardwareError,
        match="load module on metax failed: modprobe exited with 1: modprobe: ERROR: could not insert "
        "'metax': Unknown symbol in module",
    ):
        fake.modules.load("metax", {"xcore_page_size": "12"})
    assert fake.modules.state("metax") is None
    assert all(fake.driver_of(g) is None for g in fake.gpu_addresses())
    assert "/dev/mxcd" not in fake.dev_nodes()


def test_a_module_built_for_another_kernel_is_refused_as_the_kernel_refuses_it(tmp_path: Path) -> None:
    release = "5.15.0-91-generic"
    fake = (
        builder.FakeHostBuilder()
        .gpus(2)
        .kernel_release(release)
        .payload_driver("2.21.0", built_for="6.8.0-31-generic")
        .build(tmp_path / "host", timeout=2.0)
    )
    path = "/var/lib/metax/drivers/2.21.0/metax.ko"
    assert fake.modules.modinfo(path)["vermagic"] == ["6.8.0-31-generic SMP mod_unload modversions"]
    before = fake.modules.state("metax")
    with pytest.raises(errors.HardwareError, match="already loaded"):
        fake.modules.load_file(path, {})  # EEXIST first, as insmod says it, whatever the file
    fake.modules.unload("metax")
    with pytest.raises(errors.HardwareError, match="Invalid module format"):
        fake.modules.load_file(path, {"xcore_page_size": "11"})
    assert fake.modules.state("metax") is None
    assert all(fake.driver_of(g) is None for g in fake.gpu_addresses())
    assert (
        f"metax: version magic '6.8.0-31-generic SMP mod_unload modversions' should be "
        f"'{release} SMP mod_unload modversions'"
    ) in fake.dmesg()
    fake.modules.load("metax", dict(before.params) if before else {})  # the host's own driver still loads
    assert fake.modules.state("metax") == before
    assert fake.audit() == []


def test_module_in_use(fake: FakeHost) -> None:
    fake.hold_module("metax")
    with pytest.raises(errors.HardwareError, match="rmmod exited with 1: rmmod: ERROR: Module metax is in use"):
        fake.modules.unload("metax")
    assert fake.modules.state("metax") is not None
    assert all(fake.driver_of(g) == "metax" for g in fake.gpu_addresses())
    fake.clear_faults()
    fake.add_process(fake.gpu_addresses()[0], 77, "train.py")
    with pytest.raises(errors.HardwareError, match="is in use"):
        fake.modules.unload("metax")
    fake.clear_processes()
    fake.modules.unload("metax")


def test_hung_mx_smi_is_killed_at_the_deadline(fake: FakeHost) -> None:
    fake.break_mx_smi("hang")
    started = time.monotonic()
    with pytest.raises(errors.HardwareError, match="mx-smi did not answer within 2 s and was killed"):
        fake.monitor.health()
    assert time.monotonic() - started < 8
    with pytest.raises(errors.HardwareError, match="did not answer"):
        fake.adapters(timeout=0.5).monitor.metrics()


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("garbage", "no GPU table in mx-smi output"),
        ("fail", "mx-smi exited with 255: mx-smi: failed to initialize mxsml"),
    ],
)
def test_broken_mx_smi(fake: FakeHost, mode: str, message: str) -> None:
    fake.break_mx_smi(mode)
    for call in (fake.monitor.health, fake.monitor.metrics, fake.firmware.info, fake.monitor.links):
        with pytest.raises(errors.HardwareError, match=message):
            call()
    fake.break_mx_smi(None)
    assert all(h.healthy for h in fake.monitor.health().values())


def test_flash_failure_keeps_the_old_firmware(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[2]
    fake.fail_flash(gpu, "image checksum mismatch")
    with pytest.raises(
        errors.HardwareError, match="flash firmware on .* mx-smi exited with 1: .*image checksum mismatch"
    ):
        fake.firmware.flash(gpu, "/lib/firmware/metax/c500/mxvbios-1.14.0.0.bin")
    assert fake.vbios(gpu) == ("1.13.0.0", None)
    fake.binder.set_vf_count(gpu, 1)
    vf = fake.devices.function(gpu).vfs[0]
    with pytest.raises(errors.HardwareError, match="PF only"):
        fake.firmware.flash(vf, "/lib/firmware/metax/c500/mxvbios-1.14.0.0.bin")


def test_iommu_off(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(2).iommu(False).vfio().build(tmp_path / "h")
    gpu = fake.gpu_addresses()[0]
    assert not fake.devices.iommu_enabled()
    assert fake.devices.function(gpu).iommu_group is None
    with pytest.raises(errors.HardwareError, match="the IOMMU is off"):
        fake.binder.bind(gpu, "vfio-pci")
    assert (fake.driver_of(gpu), fake.override_of(gpu)) == ("metax", None)
    assert fake.audit() == []


def test_foreign_device_in_the_iommu_group(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[0]
    mate = fake.add_group_mate(gpu, "mlx5_core")
    with pytest.raises(errors.HardwareError, match=f"IOMMU group .* also holds {mate} \\(driver mlx5_core\\)"):
        fake.binder.bind(gpu, "vfio-pci")
    assert fake.driver_of(gpu) == "metax"
    fake.binder.unbind(mate)
    fake.binder.bind(gpu, "vfio-pci")
    assert fake.driver_of(gpu) == "vfio-pci"


@pytest.mark.parametrize(
    ("inject", "kind"),
    [
        (lambda fake, gpu: fake.fall_off_bus(gpu), FaultKind.FELL_OFF_BUS),
        (lambda fake, gpu: fake.binder.unbind(gpu), FaultKind.NO_DRIVER),
        (lambda fake, gpu: fake.stop_answering(gpu), FaultKind.NOT_ANSWERING),
        (lambda fake, gpu: fake.set_gpu(gpu, state="Error"), FaultKind.STATE),
        (lambda fake, gpu: fake.set_gpu(gpu, temp=99), FaultKind.THERMAL),
        (lambda fake, gpu: fake.set_gpu(gpu, power=400), FaultKind.POWER),
        (lambda fake, gpu: fake.degrade_link(gpu), FaultKind.LINK),
    ],
)
def test_every_fault_kind_the_fake_host_injects_is_read_as_that_kind_and_clears(
    fake: FakeHost, inject: Callable[[FakeHost, str], None], kind: FaultKind
) -> None:
    """R-HEALTH: each fault kind the hardware can show is injected on the fake host and read back through the
    real mx-smi adapter as exactly that kind on exactly that GPU (HealthUnknown is a failed reading: mx-smi
    breaking, above)."""
    gpu, *others = fake.gpu_addresses()
    inject(fake, gpu)
    health = fake.monitor.health()
    assert [f.kind for f in health[PciAddress(gpu)].faults] == [kind]
    assert all(health[PciAddress(o)].healthy for o in others)
    fake.clear_faults()
    fake.set_gpu(gpu, state="Available", temp=35, power=57)
    if kind is FaultKind.NO_DRIVER:
        fake.binder.bind(PciAddress(gpu), "metax")
    assert all(h.healthy for h in fake.monitor.health().values())
