"""A real Prometheus (Debian's ``prometheus``, its own config, data dir and loopback port) scrapes the
data-exporter running against a fake GPU host, with a pod holding a GPU through the PodResources server on
the real proto; every PromQL expression of the chart's Grafana dashboard returns series from it (R-EXPORTER);
the health series follow a GPU through a fault and its recovery as PromQL sees them (R-HEALTH): an unusable
fault (StateFault) takes ``metax_gpu_health_severity`` 0 → 2 → 0 and ``mx_gpu_state`` 1 → 0 → 1, a degraded
one (Thermal) severity 1 with ``mx_gpu_state`` still 1.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator

import pytest

from metax_core.metrics import names
from metax_dev import dashboard
from tests.services.exporter.conftest import NODE, Running
from tests.services.exporter.prometheus import JOB, Prometheus
from tests.waiting import wait_for


@pytest.fixture
def prometheus(running: Running, tmp_path: pathlib.Path) -> Iterator[Prometheus]:
    assert running.exporter.server is not None
    server = Prometheus(tmp_path, f"127.0.0.1:{running.exporter.server.port}")
    try:
        wait_for("prometheus ready", server.ready, timeout=60)
        yield server
    finally:
        server.stop()


def concrete(expr: str) -> str:
    """The expression as Grafana sends it with "All" nodes and a short rate interval."""
    return expr.replace("$node", ".*").replace("$__rate_interval", "1m")


def test_every_dashboard_expression_returns_series_from_a_real_prometheus(
    running: Running, prometheus: Prometheus
) -> None:
    running.kubelet.set(("team-a", "train-0", "main", "metax-tech.com/gpu", ["0000:03:00.1"]))
    wait_for("the target up", lambda: [r["value"][1] for r in prometheus.query(f'up{{job="{JOB}"}}')] == ["1"])
    held = f'{names.GPU_USAGE.name}{{pod="train-0", namespace="team-a", container="main"}}'
    wait_for("the pod's series scraped", lambda: prometheus.query(held), timeout=60)
    [series] = prometheus.query(held)
    assert series["metric"][names.HOSTNAME] == NODE and series["metric"][names.PCI_ADDRESS] == "0000:03:00.1"
    for expr in dashboard.expressions():
        wait_for(f"series for {expr}", lambda expr=expr: prometheus.query(concrete(expr)), timeout=60)
    per_pod = prometheus.query(concrete(next(e for e in dashboard.expressions() if "avg by (namespace, pod)" in e)))
    assert [(r["metric"]["namespace"], r["metric"]["pod"]) for r in per_pod] == [("team-a", "train-0")]
    nodes = prometheus.query(concrete(next(dashboard.expressions())))
    assert [r["metric"][names.HOSTNAME] for r in nodes] == [NODE]


def test_the_dashboard_names_only_metrics_and_labels_the_owner_module_defines() -> None:
    text = dashboard.render()
    body = json.loads(text)
    exprs = [t["expr"] for p in body["panels"] if p["type"] != "row" for t in p["targets"]]
    assert exprs == list(dashboard.expressions())
    known = {names.exposed_name(f) for f in names.ALL}
    used = {m for e in exprs for m in re.findall(r"\b((?:mx|metax_exporter)_[a-z_]+)\b", e)}
    assert used and used <= known


def values(prometheus: Prometheus, expr: str) -> list[str]:
    return sorted(r["value"][1] for r in prometheus.query(expr))


def test_prometheus_scrapes_the_health_series_through_a_fault_and_its_recovery(
    running: Running, prometheus: Prometheus
) -> None:
    gpu = "0000:83:00.0"
    at = f'{{{names.PCI_ADDRESS}="{gpu}"}}'
    severity, state = names.HEALTH_SEVERITY.name + at, names.GPU_STATE.name + at
    fault = f'{names.HEALTH_FAULT.name}{{{names.PCI_ADDRESS}="{gpu}"}}'
    wait_for("a fine GPU scraped", lambda: values(prometheus, severity) == ["0"], timeout=60)
    assert values(prometheus, state) == ["1"] and prometheus.query(fault) == []

    running.fake.set_gpu(gpu, state="Error")  # the tool's own state: unusable
    wait_for("the GPU unusable", lambda: values(prometheus, severity) == ["2"], timeout=60)
    wait_for("mx_gpu_state 0", lambda: values(prometheus, state) == ["0"], timeout=60)
    [down] = prometheus.query(state)
    assert down["metric"][names.UNAVAILABLE_REASON] == "StateFault: mx-smi reports GPU-State Error"
    [shown] = prometheus.query(fault)
    assert (shown["metric"][names.FAULT], shown["metric"][names.SEVERITY], shown["value"][1]) == (
        "StateFault",
        "unusable",
        "1",
    )
    assert values(prometheus, f'count({names.HEALTH_SEVERITY.name}{{{names.PCI_ADDRESS}!~"0000:83:.*"}} == 0)') == [
        "3"
    ]  # the other GPU and its VFs are fine (PF1's VFs show their PF's fault)

    running.fake.set_gpu(gpu, state="Available")
    wait_for("the GPU recovered", lambda: values(prometheus, severity) == ["0"], timeout=60)
    wait_for("mx_gpu_state 1", lambda: values(prometheus, state) == ["1"], timeout=60)
    wait_for("no fault series", lambda: prometheus.query(fault) == [], timeout=60)
    # What Prometheus stored: 0 -> 2 -> 0 (two changes), never below 0 or between.
    assert values(prometheus, f"changes({severity}[5m])") == ["2"]
    assert values(prometheus, f"max_over_time({severity}[5m])") == ["2"]
    assert values(prometheus, f'min_over_time({names.GPU_STATE.name}{{{names.PCI_ADDRESS}="{gpu}"}}[5m])') == [
        "0",
        "1",
    ]  # the series with the verdict's words as unavailable_reason (0), the one without (1)

    running.fake.set_gpu(gpu, temp=99)  # hotter than the 95 °C limit: degraded, still available
    wait_for("the GPU degraded", lambda: values(prometheus, severity) == ["1"], timeout=60)
    [hot] = prometheus.query(fault)
    assert (hot["metric"][names.FAULT], hot["metric"][names.SEVERITY]) == ("Thermal", "degraded")
    assert values(prometheus, state) == ["1"]
    running.fake.set_gpu(gpu, temp=35)
    wait_for("the GPU fine again", lambda: values(prometheus, severity) == ["0"], timeout=60)
    wait_for("no fault series", lambda: prometheus.query(fault) == [], timeout=60)
