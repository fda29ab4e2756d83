"""The data-exporter (C8, R-EXPORTER) against a fake GPU host and a PodResources server on the real proto.

Aspects: ``/metrics`` parsed by prometheus_client's text parser and checked by ``promtool check metrics``;
mx-exporter's names, units and label keys; telemetry the host changes shows up within a sampling; a GPU that
stops answering keeps its series with ``mx_gpu_state`` 0 (NotAnswering) and a growing age, and comes back; a
failing tool is unknown: verdicts kept for the grace, then every GPU HealthUnknown (degraded, still
``mx_gpu_state`` 1), and known again with the next reading; VFs and sGPU
shares labelled with their holders, refreshed when allocations change; the kubelet gone keeps the last
holders and counts errors; ``exported_*`` label keys; a scrape while a sampling hangs is served the last
sample; the PodResources List is polled per sampling, not per scrape.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import threading

import pytest

from metax_core.metrics import names
from metax_hw_fake import builder
from services.data_exporter import agent
from tests.services.exporter.conftest import NODE, Running, exporter_on, start_exporter
from tests.services.exporter.kubelet_podresources import PodResourcesServer
from tests.waiting import wait_for

PF0, VF1, VF2, PF1 = "0000:03:00.0", "0000:03:00.1", "0000:03:00.2", "0000:83:00.0"


def by_address(samples: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {labels["pci_address"]: value for labels, value in samples}


def test_metrics_parse_and_pass_promtool_with_mx_exporter_names(running: Running) -> None:
    text = running.scrape()
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool missing: Debian package prometheus (./run installs it)"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    # 0: clean; 3: lint findings only (1 would be unparseable). The only findings allowed are mx-exporter's own
    # spelling, kept on purpose so its dashboards work: camelCase label keys and the gauge mx_memory_total.
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr
    findings = [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]
    unexpected = [
        line
        for line in findings
        if not line.endswith("label names should be written in 'snake_case' not 'camelCase'")
        and line != 'mx_memory_total non-counter metrics should not have "_total" suffix'
    ]
    assert unexpected == []
    camel = {line.split()[0] for line in findings if "camelCase" in line}
    assert camel <= {f.name for f in names.ALL if f.per_gpu}
    usage = running.samples("mx_gpu_usage")
    assert {labels["pci_address"] for labels, _ in usage} == {PF0, VF1, VF2, PF1, "0000:83:00.1", "0000:83:00.2"}
    labels = dict(usage[0][0])
    for key in (names.DEVICE_ID, names.HOSTNAME, names.DRIVER_VERSION, names.BIOS_VERSION, names.MODEL_NAME):
        assert key in labels
    assert labels[names.HOSTNAME] == NODE and labels[names.DRIVER_VERSION] == "2.18.0"
    total = {labels["pci_address"]: (labels["type"], v) for labels, v in running.samples("mx_memory_total")}
    assert total[PF0] == ("vram", 64 * 1024 * 1024)  # KB of the fake's 65536 MiB
    assert by_address(running.samples("mx_board_power"))[PF0] == 57000.0  # mW of 57 W
    assert running.samples("metax_exporter_driver_info")[0][0]["maca_version"]
    assert running.samples("metax_exporter_build_info")


def test_telemetry_changes_show_up_and_a_gpu_that_stops_answering_keeps_its_series(running: Running) -> None:
    running.fake.set_gpu(PF1, util=87, temp=71, power=300)
    wait_for("the new telemetry", lambda: by_address(running.samples("mx_gpu_usage")).get(PF1) == 87.0, timeout=30)
    assert by_address(running.samples("mx_chip_hotspot_temp"))[PF1] == 71.0

    running.fake.stop_answering(PF1)
    wait_for("PF1 unavailable", lambda: by_address(running.samples("mx_gpu_state")).get(PF1) == 0.0, timeout=30)
    state = {
        labels["pci_address"]: labels.get("unavailable_reason", "") for labels, _ in running.samples("mx_gpu_state")
    }
    assert state[PF1] == "NotAnswering: bound to the driver but not listed by mx-smi" and state[PF0] == ""
    assert by_address(running.samples("metax_gpu_health_severity"))[PF1] == 2.0
    assert by_address(running.samples("mx_gpu_usage"))[PF1] == 87.0  # the last value, not a vanished series
    first = by_address(running.samples("metax_exporter_gpu_sample_age_seconds"))[PF1]
    wait_for(
        "PF1's age to grow",
        lambda: by_address(running.samples("metax_exporter_gpu_sample_age_seconds"))[PF1] > first + 0.3,
        timeout=30,
    )
    assert by_address(running.samples("metax_exporter_gpu_sample_age_seconds"))[PF0] < 5

    running.fake.stop_answering(PF1, answering=True)
    wait_for("PF1 back", lambda: by_address(running.samples("mx_gpu_state")).get(PF1) == 1.0, timeout=30)


def test_a_failing_tool_is_unknown_verdicts_kept_for_the_grace_then_health_unknown(tmp_path: pathlib.Path) -> None:
    fake = builder.FakeHostBuilder().gpus(2).host_driver("2.18.0").vfs(2).build(tmp_path / "host")
    with exporter_on(tmp_path, fake, METAX_HEALTH_UNKNOWN_GRACE="3") as running:

        def errors() -> float:
            found = running.samples("metax_exporter_collection_errors_total")
            return next(v for labels, v in found if labels["collector"] == "telemetry")

        running.fake.break_mx_smi("fail")
        wait_for("a telemetry error counted", lambda: errors() >= 1, timeout=30)
        # Within the grace: unknown, not unhealthy; every GPU keeps its verdict (available, fine).
        assert set(by_address(running.samples("mx_gpu_state")).values()) == {1.0}
        assert running.samples("metax_gpu_health_fault") == []
        age = running.samples("metax_exporter_sample_age_seconds")[0][1]
        wait_for(
            "every GPU HealthUnknown",
            lambda: (
                {labels["fault"] for labels, _ in running.samples("metax_gpu_health_fault")} == {"HealthUnknown"}
                and len(running.samples("metax_gpu_health_fault")) == 6
            ),
            timeout=30,
        )
        assert set(by_address(running.samples("metax_gpu_health_severity")).values()) == {1.0}  # degraded
        assert set(by_address(running.samples("mx_gpu_state")).values()) == {1.0}  # a degraded GPU still works
        assert {labels["severity"] for labels, _ in running.samples("metax_gpu_health_fault")} == {"degraded"}
        assert running.samples("metax_exporter_sample_age_seconds")[0][1] > age
        assert len(running.samples("mx_gpu_usage")) == 6  # every series kept
        running.fake.break_mx_smi(None)
        wait_for(
            "GPUs known again",
            lambda: set(by_address(running.samples("metax_gpu_health_severity")).values()) == {0.0},
            timeout=30,
        )
        assert running.samples("metax_gpu_health_fault") == []


def holders(running: Running, name: str = "mx_gpu_usage") -> set[tuple[str, str, str, str]]:
    return {
        (labels["pci_address"], labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        for labels, _ in running.samples(name)
        if labels.get("pod")
    }


def test_vfs_and_sgpu_shares_carry_their_holders_refreshed_when_allocations_change(running: Running) -> None:
    running.kubelet.set(
        ("team-a", "train-0", "main", "metax-tech.com/gpu", [VF1]),
        ("team-b", "infer-0", "server", "metax-tech.com/sgpu", [f"{PF1}-00", f"{PF1}-01"]),
        ("team-c", "infer-1", "server", "metax-tech.com/sgpu", [f"{PF1}-02"]),
        ("team-d", "cuda", "main", "nvidia.com/gpu", ["GPU-abc"]),
    )
    expected = {
        (VF1, "team-a", "train-0", "main"),
        (PF1, "team-b", "infer-0", "server"),
        (PF1, "team-c", "infer-1", "server"),
    }
    wait_for("the holders", lambda: holders(running) == expected, timeout=30)
    assert holders(running, "mx_gpu_state") == expected
    shares = {labels["pod"]: v for labels, v in running.samples("metax_exporter_gpu_holders") if labels.get("pod")}
    assert shares == {"train-0": 1.0, "infer-0": 2.0, "infer-1": 1.0}
    unheld = {labels["pci_address"] for labels, _ in running.samples("mx_gpu_usage") if not labels.get("pod")}
    assert unheld == {PF0, VF2, "0000:83:00.1", "0000:83:00.2"}  # every GPU keeps a series

    running.kubelet.set(("team-a", "train-1", "main", "metax-tech.com/gpu", [VF2]))
    wait_for("the new allocation", lambda: holders(running) == {(VF2, "team-a", "train-1", "main")}, timeout=30)


def test_the_kubelet_gone_keeps_the_last_holders_and_counts_errors(running: Running) -> None:
    running.kubelet.set(("team-a", "train-0", "main", "metax-tech.com/gpu", [VF1]))
    wait_for("the holder", lambda: holders(running) == {(VF1, "team-a", "train-0", "main")}, timeout=30)
    running.kubelet.stop()

    def errors() -> float:
        found = running.samples("metax_exporter_collection_errors_total")
        return next(v for labels, v in found if labels["collector"] == "pod_resources")

    wait_for("a PodResources error counted", lambda: errors() >= 1, timeout=30)
    assert holders(running) == {(VF1, "team-a", "train-0", "main")}
    success = {labels["collector"]: v for labels, v in running.samples("metax_exporter_collector_success")}
    assert success == {"telemetry": 1.0, "pod_resources": 0.0}


def test_pod_resources_are_polled_per_sampling_not_per_scrape(running: Running) -> None:
    with running.kubelet.lock:
        before = running.kubelet.calls
    for _ in range(30):
        running.scrape()
    with running.kubelet.lock:
        during = running.kubelet.calls - before
    # 30 scrapes over a few sampling intervals: a List per scrape would be >= 30 calls.
    assert during < 30


def test_exported_label_keys_as_mx_exporter_spells_them(tmp_path: pathlib.Path) -> None:
    fake = builder.FakeHostBuilder().gpus(1).host_driver("2.18.0").build(tmp_path / "host")
    kubelet = PodResourcesServer(tmp_path / "kubelet.sock").start()
    kubelet.set(("team-a", "train-0", "main", "metax-tech.com/gpu", ["0000:03:00.0"]))
    built, stop, thread = start_exporter(tmp_path, fake, kubelet.socket, METAX_EXPORTER_EXPORTED_POD_LABELS="true")
    try:
        run = Running(fake, kubelet, built)
        wait_for("the holder", lambda: any(labels.get("exported_pod") for labels, _ in run.samples("mx_gpu_usage")))
        [(labels, _)] = run.samples("mx_gpu_usage")
        assert (labels["exported_namespace"], labels["exported_pod"], labels["exported_container"]) == (
            "team-a",
            "train-0",
            "main",
        )
        assert "pod" not in labels and "namespace" not in labels
    finally:
        stop.set()
        thread.join(timeout=30)
        kubelet.stop()


class BlockedGpus:
    """A telemetry port whose reading blocks until released (a hung tool), after a first good reading."""

    def __init__(self, real: agent.hardware.GpuTelemetry) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.first = True

    def telemetry(self) -> agent.telemetry.Telemetry:
        if not self.first:
            self.entered.set()
            self.release.wait(60)
        self.first = False
        return self.real.telemetry()


def test_a_scrape_during_a_hung_sampling_is_served_the_last_sample(running: Running) -> None:
    blocked = BlockedGpus(running.fake.monitor)
    exporter = running.exporter
    exporter.sample()
    exporter.hw = agent.Sources(blocked, None)
    blocked.first = False
    sampler = threading.Thread(target=exporter.sample, daemon=True)
    try:
        sampler.start()
        assert blocked.entered.wait(30)
        assert len(running.samples("mx_gpu_usage")) == 6  # served while the sampling hangs
    finally:
        blocked.release.set()
        sampler.join(30)


@pytest.mark.parametrize("running", [(1, 0)], indirect=True)
def test_readyz_and_the_probe_file_say_the_exporter_serves(running: Running, tmp_path: pathlib.Path) -> None:
    import urllib.request

    with urllib.request.urlopen(running.url + "/readyz", timeout=10) as response:
        assert response.status == 200 and b"serving 1 GPU" in response.read()
    # The probe file is written right after the sample that /readyz reports is published.
    wait_for("the probe file", (tmp_path / "probe").exists, timeout=30)


def test_the_ages_laid_out_per_sampling_read_back_as_prometheus_client_renders_them(running: Running) -> None:
    """`collector.Ages` writes the age lines itself (a scrape only subtracts): the text parser reads them back
    as the same samples prometheus_client's own rendering of those families gives, odd label values included."""
    import prometheus_client
    from prometheus_client.parser import text_string_to_metric_families

    from metax_core.metrics import attribution
    from services.data_exporter import collector

    odd = attribution.Holder('team "a"', "pod\\with\nnewline", "c")
    view = collector.View(
        sample=running.exporter.view.sample,
        holdings={VF1: (attribution.Holding(odd, "metax-tech.com/gpu", 1),)},
    )
    options = running.exporter.options
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(collector.SampleCollector(lambda: view, options, lambda: 5000.0, families=names.AGES))

    def parsed(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        )

    ours = parsed(collector.Ages.of(view, options).text(5000.0).decode())
    assert ours == parsed(prometheus_client.generate_latest(registry).decode())
    assert any(dict(labels).get("pod") == "pod\\with\nnewline" for _, labels, _ in ours)


def test_a_port_in_use_is_said_once_and_retried_while_sampling_goes_on(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import socket

    from services.data_exporter import bootstrap, config

    fake = builder.FakeHostBuilder().gpus(1).host_driver("2.18.0").build(tmp_path / "host")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = config.from_env(
            {"NODE_NAME": NODE, "METAX_EXPORTER_ADDRESS": "127.0.0.1", "METAX_EXPORTER_PORT": str(port)}
        )
        exporter = bootstrap.bootstrap(settings, hw=agent.Sources(fake.monitor, None))
        with caplog.at_level(logging.ERROR, logger="services.data_exporter.agent"):
            for _ in range(3):
                exporter.wake()
                exporter.tick()
        assert exporter.server is None and exporter.view.sample.sampled_at is not None
        [said] = [r.getMessage() for r in caplog.records]  # three failing ticks, one line
        assert f"cannot listen on 127.0.0.1:{port}" in said
    exporter.tick()  # the port is free again
    try:
        assert exporter.server is not None and exporter.server.port == port
    finally:
        exporter.shutdown()
