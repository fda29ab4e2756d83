"""A real Prometheus (Debian's ``prometheus``, its own config, data dir and loopback port) scrapes the
data-exporter running against a fake GPU host, with a pod holding a GPU through the PodResources server on
the real proto; every PromQL expression of the chart's Grafana dashboard returns series from it (R-EXPORTER).
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
