"""The data-exporter on libmxsml (C8, R-EXPORTER): the telemetry source chosen at start, then served like mx-smi's.

Aspects: the first library path present is loaded and said in the log; no library, an empty setting or a
library whose init fails means mx-smi, said in the log, never a crash; on the library (the fake one compiled
from metax_hw_fake/libmxsml_fake.c, installed at the fake host's /opt/mxdriver/lib) the series carry the UUID
and xtt memory mx-smi cannot give, telemetry the host changes shows up, mx-smi is not needed, and a GPU that
stops answering keeps its series with ``mx_gpu_state`` 0 (fault NotAnswering) naming the failing call, its
age growing.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Iterator

import pytest

from metax_hw import mxsml
from metax_hw_fake import builder
from metax_hw_fake import host as fake_host
from services.data_exporter import bootstrap
from tests.services.exporter.conftest import Running, exporter_on
from tests.waiting import wait_for

PF0, PF1 = "0000:03:00.0", "0000:83:00.0"


@pytest.fixture
def fake(tmp_path: pathlib.Path) -> fake_host.FakeHost:
    host = builder.FakeHostBuilder().gpus(2).host_driver("2.18.0").vfs(2).build(tmp_path / "host")
    host.install_mxsml()
    return host


def library_path(fake: fake_host.FakeHost) -> str:
    return str(fake.root / "opt/mxdriver/lib/libmxsml.so")


def test_the_first_present_library_is_used_and_logged(
    fake: fake_host.FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.data_exporter.bootstrap")
    absent = str(fake.root / "opt/maca/lib/libmxsml.so")
    chosen = bootstrap.telemetry_source((absent, library_path(fake)), fake.devices, fake.monitor)
    assert isinstance(chosen, mxsml.MxSmlMonitor) and chosen.library.path == library_path(fake)
    assert caplog.messages == [f"telemetry from libmxsml at {library_path(fake)}"]


def test_no_library_or_an_empty_setting_means_mx_smi(
    fake: fake_host.FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.data_exporter.bootstrap")
    absent = str(fake.root / "opt/maca/lib/libmxsml.so")
    assert bootstrap.telemetry_source((absent,), fake.devices, fake.monitor) is fake.monitor
    assert bootstrap.telemetry_source((), fake.devices, fake.monitor) is fake.monitor
    assert caplog.messages == [
        f"no libmxsml at {absent}: telemetry from mx-smi",
        "METAX_EXPORTER_MXSML_LIBRARY is empty: telemetry from mx-smi",
    ]


def test_a_library_whose_init_fails_falls_back_to_mx_smi_with_a_clear_line(
    fake: fake_host.FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_mxsml_init(26)
    caplog.set_level(logging.INFO, logger="services.data_exporter.bootstrap")
    assert bootstrap.telemetry_source((library_path(fake),), fake.devices, fake.monitor) is fake.monitor
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"libmxsml at {library_path(fake)} is unusable (libmxsml mxSmlInit failed: returned 26 "
        "(MXSML_LoadDllFailure): error (fake libmxsml)): telemetry from mx-smi"
    )


@pytest.fixture
def running(tmp_path: pathlib.Path, fake: fake_host.FakeHost) -> Iterator[Running]:
    gpus = bootstrap.telemetry_source((library_path(fake),), fake.devices, fake.monitor)
    assert isinstance(gpus, mxsml.MxSmlMonitor)
    with exporter_on(tmp_path, fake, gpus) as running:
        yield running


def by_address(samples: list[tuple[dict[str, str], float]], **match: str) -> dict[str, float]:
    return {
        labels["pci_address"]: value for labels, value in samples if all(labels.get(k) == v for k, v in match.items())
    }


def test_the_exporter_serves_what_only_the_library_has(running: Running) -> None:
    uuids = {labels["pci_address"]: labels["uuid"] for labels, _ in running.samples("mx_gpu_usage")}
    assert uuids[PF0] == f"GPU-{PF0}" and len(uuids) == 6
    assert by_address(running.samples("mx_memory_total"), type="xtt") == {}  # the fake reports no xtt yet
    running.fake.set_gpu(PF1, util=64, xtt_total_mib=1024, xtt_used_mib=256)
    wait_for("PF1's xtt", lambda: by_address(running.samples("mx_memory_total"), type="xtt").get(PF1) == 1048576.0)
    assert by_address(running.samples("mx_memory_used"), type="xtt")[PF1] == 262144.0
    assert by_address(running.samples("mx_memory_usage"), type="xtt")[PF1] == 25.0
    assert by_address(running.samples("mx_gpu_usage"))[PF1] == 64.0
    # The library, not mx-smi, feeds it: a broken mx-smi changes nothing.
    running.fake.break_mx_smi("fail")
    running.fake.set_gpu(PF0, util=12)
    wait_for("PF0's new usage", lambda: by_address(running.samples("mx_gpu_usage"))[PF0] == 12.0)
    assert set(by_address(running.samples("mx_gpu_state")).values()) == {1.0}


def test_a_gpu_that_stops_answering_keeps_its_series_naming_the_failing_call(running: Running) -> None:
    running.fake.set_gpu(PF1, util=87)
    wait_for("PF1 at 87 %", lambda: by_address(running.samples("mx_gpu_usage")).get(PF1) == 87.0)
    running.fake.stop_answering(PF1)
    wait_for("PF1 unavailable", lambda: by_address(running.samples("mx_gpu_state")).get(PF1) == 0.0)
    reasons = {labels["pci_address"]: labels["unavailable_reason"] for labels, _ in running.samples("mx_gpu_state")}
    assert reasons[PF1].startswith(
        "NotAnswering: libmxsml mxSmlGetMemoryInfo on device 3 failed: returned 1 (MXSML_Failure)"
    )
    assert reasons[PF0] == ""
    assert by_address(running.samples("mx_gpu_usage"))[PF1] == 87.0  # the last value, not a vanished series
    first = by_address(running.samples("metax_exporter_gpu_sample_age_seconds"))[PF1]
    wait_for(
        "PF1's age to grow",
        lambda: by_address(running.samples("metax_exporter_gpu_sample_age_seconds"))[PF1] > first + 0.3,
    )
    running.fake.stop_answering(PF1, answering=True)
    wait_for("PF1 back", lambda: by_address(running.samples("mx_gpu_state")).get(PF1) == 1.0)
