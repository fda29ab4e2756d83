"""The libmxsml ctypes binding (metax_hw/mxsml.py, R-EXPORTER) against a real shared object: the fake library
compiled from metax_hw_fake/libmxsml_fake.c with gcc (cached by its source's hash).

Aspects: every value the exporter reads round-trips in the library's units (KiB, mW split over two board
inputs, hundredths of °C) with the UUID and xtt memory mx-smi lacks; PFs of an SR-IOV host numbered from 100;
a call the device does not support is no value, not an error; failing return codes become HardwareErrors
naming the call and the code; a library that lacks a call, or is not a library, is refused at load.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from metax_core import errors
from metax_hw import mxsml
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHost]:
    host = builder.FakeHostBuilder().gpus(2).host_driver("2.18.0").vfs(1).build(tmp_path / "host", timeout=5.0)
    host.install_mxsml()
    yield host
    assert host.audit() == []


def _open(fake: FakeHost) -> mxsml.Library:
    return mxsml.open_library(str(fake.root / "opt/mxdriver/lib/libmxsml.so"))


def test_values_round_trip_in_the_librarys_units(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[1]
    fake.set_gpu(
        gpu, util=41, temp=66.25, power=301, power_cap=450, mem_used_mib=2048, xtt_total_mib=512, xtt_used_mib=128
    )
    fake.set_gpu(gpu, uuid="GPU-5b3b1e10-0c5e")
    reading = {g.function.address: g for g in mxsml.MxSmlMonitor(_open(fake), fake.devices).telemetry().gpus}
    m = reading[gpu].metrics
    assert m is not None
    assert (m.utilization_percent, m.temperature_celsius) == (41.0, 66.25)
    assert (m.power_milliwatts, m.power_cap_milliwatts) == (301000.0, 450000.0)  # the sum of two board inputs
    assert (m.memory_used_bytes, m.memory_total_bytes) == (2048 << 20, 65536 << 20)
    assert (m.xtt_used_bytes, m.xtt_total_bytes) == (128 << 20, 512 << 20)
    assert (m.uuid, m.name, m.index) == ("GPU-5b3b1e10-0c5e", "MetaX C500", 2)
    other = reading[fake.gpu_addresses()[0]].metrics
    assert other is not None and (other.xtt_used_bytes, other.uuid) == (None, f"GPU-{fake.gpu_addresses()[0]}")


def test_pfs_of_an_sriov_host_are_numbered_from_100(fake: FakeHost) -> None:
    fake.number_pfs_from_100()
    library = _open(fake)
    assert library.device_ids() == [0, 1, 100, 101]
    reading = mxsml.MxSmlMonitor(library, fake.devices).telemetry()
    index = {g.function.address: g.metrics.index for g in reading.gpus if g.metrics is not None}
    pfs = fake.gpu_addresses()
    assert (index[pfs[0]], index[pfs[1]]) == (100, 101)
    assert sorted(index[vf] for pf in pfs for vf in fake.vfs_of(pf)) == [0, 1]


def test_a_value_the_device_does_not_offer_is_none_not_an_error(fake: FakeHost) -> None:
    gpu = fake.gpu_addresses()[0]
    fake.set_gpu(gpu, power=None)
    library = _open(fake)
    assert library.board_power_mw(0) is None
    [read] = [g for g in mxsml.MxSmlMonitor(library, fake.devices).telemetry().gpus if g.function.address == gpu]
    assert read.health.healthy and read.metrics is not None
    assert (read.metrics.power_milliwatts, read.metrics.utilization_percent) == (None, 0.0)


def test_failing_calls_name_the_call_and_the_code(fake: FakeHost) -> None:
    fake.fail_mxsml_init(4)
    with pytest.raises(errors.HardwareError) as init:
        _open(fake)
    assert str(init.value) == ("libmxsml mxSmlInit failed: returned 4 (MXSML_SysfsError): error (fake libmxsml)")
    fake.fail_mxsml_init(0)
    library = _open(fake)
    with pytest.raises(errors.HardwareError, match=r"^libmxsml mxSmlGetDeviceInfo on device 7 failed: returned 6 "):
        library.device_info(7)
    fake.stop_answering(fake.gpu_addresses()[0])
    with pytest.raises(errors.HardwareError, match=r"mxSmlGetTemperatureInfo on device 0 .* 1 \(MXSML_Failure\)"):
        library.temperature_centi(0)
    assert mxsml.code_name(99) == "unknown code 99"


def test_a_library_without_a_needed_call_or_not_a_library_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "partial.c"
    source.write_text("unsigned int mxSmlInit(void) { return 0; }\n")
    partial = tmp_path / "libpartial.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(partial), str(source)], check=True)
    with pytest.raises(
        errors.HardwareError, match=r"^load libmxsml failed: .*libpartial.so has no mxSmlGetErrorString"
    ):
        mxsml.Library(str(partial))
    garbage = tmp_path / "libmxsml.so"
    garbage.write_bytes(b"not an ELF file")
    with pytest.raises(errors.HardwareError, match=r"^load libmxsml failed: .*libmxsml.so"):
        mxsml.Library(str(garbage))


def test_bus_ids_are_read_as_pci_addresses() -> None:
    assert mxsml.parse_bdf("0000:3B:00.1") == "0000:3b:00.1"
    assert mxsml.parse_bdf("3b:00.0") == "0000:3b:00.0"
    with pytest.raises(errors.HardwareError, match="bdfId 'GPU0' is not a PCI address"):
        mxsml.parse_bdf("GPU0")
