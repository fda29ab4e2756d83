"""The real-kernel cases (tests/realkernel/hwcases.py) on the fake host: the fake kernel must agree with Linux.

Aspects covered: the same case functions the QEMU guest runs on Debian's kernel (VF counts through zero,
``sriov_numvfs`` EBUSY/ERANGE, refusal above the total, VF addresses from ``sriov_offset``/``sriov_stride``,
``sriov_vf_device`` as bare hex, vfio-pci bind without driver_override ENODEV and back, no driver for a VF
when ``sriov_drivers_autoprobe`` is 0, whole IOMMU groups, vfio-pci's bool parameter read back as ``Y``, a
process killed between the writes of a bind converging), on a fake GPU whose SR-IOV layout is an igb-like
offset 128 / stride 2 (VFs at <bus>:10.0, :10.2, ... as igb's are). The fake host is audited
after each case.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metax_hw import host, sysfs
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost
from tests.realkernel import hwcases


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHost]:
    fake = builder.FakeHostBuilder().gpus(1, sriov_totalvfs=3, sriov_offset=128, sriov_stride=2).build(tmp_path / "h")
    yield fake
    assert fake.audit() == []


def _rig(fake: FakeHost) -> hwcases.Rig:
    def reopen(writer: sysfs.SysfsWriter) -> host.Host:
        return host.open_host(fake.root, writer=writer, tool_path=[str(fake.bin_dir)], net_source=host.NetSource.SYSFS)

    return hwcases.Rig(hw=fake.hw, pf=fake.gpu_addresses()[0], write=fake.kernel, reopen=reopen)


@pytest.mark.parametrize("case", list(hwcases.CASES))
def test_case_passes_on_the_fake_kernel(case: str, fake: FakeHost) -> None:
    ok, message, _ = hwcases.run(_rig(fake), case)
    assert ok, message


def test_a_pf_driver_that_leaves_its_vfs(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(1, sriov_totalvfs=3).driver_leaves_vfs().build(tmp_path / "h")
    ok, message, _ = hwcases.run(_rig(fake), "pf_without_driver")
    assert ok, message
    fake.binder.set_vf_count(fake.gpu_addresses()[0], 1)
    fake.modules.unload("metax")
    assert len(fake.vfs_of(fake.gpu_addresses()[0])) == 1
    assert fake.audit() == []


def test_vf_addresses_follow_offset_and_stride(fake: FakeHost) -> None:
    rig = _rig(fake)
    fake.binder.set_vf_count(rig.pf, 3, drivers_autoprobe=False)
    bus = rig.pf.split(":")[1]
    assert fake.vfs_of(rig.pf) == [f"0000:{bus}:10.0", f"0000:{bus}:10.2", f"0000:{bus}:10.4"]
    assert hwcases.check_vfs(rig, 3) == fake.vfs_of(rig.pf)
    fake.binder.set_vf_count(rig.pf, 0)


def test_vf_routing_ids_carry_into_the_next_bus(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(1, sriov_totalvfs=2, sriov_offset=255).build(tmp_path / "h")
    pf = fake.gpu_addresses()[0]
    fake.binder.set_vf_count(pf, 2)
    bus = int(pf.split(":")[1], 16)
    assert fake.vfs_of(pf) == [f"0000:{bus:02x}:1f.7", f"0000:{bus + 1:02x}:00.0"]
    assert fake.audit() == []
