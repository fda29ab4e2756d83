"""The two telemetry adapters agree (R-EXPORTER, C8): mx-smi's text (`gpus.MxSmiMonitor`) and libmxsml through
ctypes (`mxsml.MxSmlMonitor`, on the fake library compiled from metax_hw_fake/libmxsml_fake.c) report the same
functions, health and numbers for the same fake host, whatever the test changes on it.

What only the library has (UUID, xtt memory) is compared to the fake's records instead. Health is compared by
its fault kinds (`metax_core.health.faults.FaultKind`), and by each fault's words with the source's name swapped,
except a StateFault's (mx-smi prints a GPU-State word, libmxsml returns a number).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from metax_core.health.faults import FaultKind
from metax_core.metrics import telemetry
from metax_hw import mxsml
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHost]:
    host = builder.FakeHostBuilder().gpus(3).host_driver("2.18.0").vfs(2).build(tmp_path / "host", timeout=5.0)
    host.install_mxsml()
    yield host
    assert host.audit() == []


def _library(fake: FakeHost) -> mxsml.MxSmlMonitor:
    return mxsml.MxSmlMonitor(mxsml.open_library(str(fake.root / "opt/mxdriver/lib/libmxsml.so")), fake.devices)


def _neutral(reading: telemetry.Telemetry, source: str) -> list[tuple[object, ...]]:
    """Each function's address, fault kinds, their source-neutral words and tool-visible numbers."""
    out: list[tuple[object, ...]] = []
    for g in reading.gpus:
        metrics = attrs.evolve(g.metrics, uuid="", xtt_used_bytes=None, xtt_total_bytes=None) if g.metrics else None
        kinds = tuple(f.kind for f in g.health.faults)
        # mx-smi's GPU-State text, libmxsml's state number: a StateFault's words differ by nature.
        words = tuple(f.detail.replace(source, "<tool>") for f in g.health.faults if f.kind is not FaultKind.STATE)
        out.append((g.function.address, kinds, words, metrics))
    return out


def _kinds(gpu: telemetry.GpuReading) -> set[FaultKind]:
    return {f.kind for f in gpu.health.faults}


def _same(fake: FakeHost, library: mxsml.MxSmlMonitor) -> telemetry.Telemetry:
    smi, lib = fake.monitor.telemetry(), library.telemetry()
    assert _neutral(lib, "libmxsml") == _neutral(smi, "mx-smi")
    assert (lib.driver_version, lib.maca_version, lib.bios_version) == (
        smi.driver_version,
        smi.maca_version,
        smi.bios_version,
    )
    return lib


def test_both_adapters_read_the_same_host(fake: FakeHost) -> None:
    lib = _same(fake, _library(fake))
    assert len(lib.gpus) == 9 and all(g.metrics is not None and g.health.healthy for g in lib.gpus)
    assert lib.driver_version == "2.18.0"


def test_changed_telemetry_reaches_both(fake: FakeHost) -> None:
    library = _library(fake)
    gpu, other, third = fake.gpu_addresses()[:3]
    fake.set_gpu(gpu, util=73, temp=61.5, power=212, power_cap=300, mem_used_mib=4096)
    fake.set_gpu(other, state="Unavailable")
    lib = _same(fake, library)
    by_address = {g.function.address: g for g in lib.gpus}
    m = by_address[gpu].metrics
    assert m is not None
    assert (m.utilization_percent, m.temperature_celsius, m.power_milliwatts, m.power_cap_milliwatts) == (
        73.0,
        61.5,
        212000.0,
        300000.0,
    )
    assert m.memory_used_bytes == 4096 * 1024 * 1024
    assert _kinds(by_address[other]) == {FaultKind.STATE} and by_address[third].health.healthy


def test_a_gpu_that_stops_answering_is_unavailable_in_both(fake: FakeHost) -> None:
    library = _library(fake)
    gpu = fake.gpu_addresses()[1]
    fake.stop_answering(gpu)
    smi = {g.function.address: g for g in fake.monitor.telemetry().gpus}
    lib = {g.function.address: g for g in library.telemetry().gpus}
    assert smi[gpu].metrics is None and lib[gpu].metrics is None
    assert _kinds(smi[gpu]) == _kinds(lib[gpu]) == {FaultKind.NOT_ANSWERING}
    # mx-smi leaves it out of its table; libmxsml still enumerates it but its calls fail, named with their code.
    [silent_smi], [silent_lib] = smi[gpu].health.faults, lib[gpu].health.faults
    assert silent_smi.detail == "bound to the driver but not listed by mx-smi"
    assert "mxSmlGetMemoryInfo" in silent_lib.detail and "returned 1 (MXSML_Failure)" in silent_lib.detail
    # The others read the same, but for the index: mx-smi numbers the rows it prints, the library keeps ids.
    others = [(smi[a].metrics, lib[a].metrics) for a in smi if a != gpu]
    assert all(a is not None and b is not None for a, b in others)
    assert [attrs.evolve(a, index=0) for a, _ in others if a] == [
        attrs.evolve(b, uuid="", index=0) for _, b in others if b
    ]
    fake.stop_answering(gpu, answering=True)
    _same(fake, library)


def test_a_gpu_off_the_bus_is_judged_by_sysfs_in_both(fake: FakeHost) -> None:
    library = _library(fake)
    gpu = fake.gpu_addresses()[0]
    fake.fall_off_bus(gpu)
    lib = _same(fake, library)
    faults = {g.function.address: g.health.faults for g in lib.gpus}
    [fallen] = faults[gpu]
    assert (fallen.kind, fallen.detail) == (FaultKind.FELL_OFF_BUS, "config space reads 0xffff")
    vfs = [a for a in faults if a != gpu and a.startswith(gpu[:-1])]  # its VFs die with it
    assert vfs and all({f.kind for f in faults[a]} == {FaultKind.FELL_OFF_BUS} for a in vfs)
