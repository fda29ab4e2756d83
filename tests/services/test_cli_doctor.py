"""`metax-operator doctor` gathers and prints (R-DOCTOR): against the in-memory API server.

Aspects: one node's table names every link, the first broken one with its evidence and the command to look
closer, exit 1; ``-o json`` is the report's document; without NODE the summary (nodes per state, the CR's
conditions, the rollout's phase); an unknown node is exit 2 (with ``-o json`` a JSON error document); an
unreadable cluster is exit 3 with a message, no traceback (every cluster command alike:
tests/services/test_cli_cluster_access.py). (The chain's rules: tests/unit/test_doctor.py; on a live install:
tests/integration/operator/test_doctor_live.py.)
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from metax_core import components
from metax_core.cluster import render_settings
from metax_core.cluster.doctor import report as doctor_report
from metax_core.node import labels as node_labels
from metax_core.spec import model as spec
from metax_core.wire import event_reasons, meta
from metax_k8s import crd
from metax_k8s import events as k8s_events
from metax_k8s.inmemory import InMemoryApiServer
from services.cli import connection, doctor, documents, main

NS = render_settings.RenderSettings().namespace
CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
GPU_NODE, CPU_NODE = "gpu-a", "cpu-a"
RUNTIME_HAS_AGENT = components.BY_COMPONENT[components.Component.RUNTIME].probe is not None
FIRST = (
    ("driver-ready", "driver readiness signal", "metax-driver-1")
    if RUNTIME_HAS_AGENT
    else (
        "container-runtime-ready",
        "container-runtime readiness signal",
        "metax-container-runtime-1",
    )
)
"""The first broken link on the GPU node: its driver pod is not Ready (container-runtime's is, when its agent
declares a probe; else container-runtime publishes no signal)."""


def _pod(name: str, component: str, node: str, *, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {meta.COMPONENT_LABEL: component, meta.PART_OF_LABEL: meta.PART_OF},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.fixture
def api() -> InMemoryApiServer:
    server = InMemoryApiServer()
    server.apply(crd.crd(), field_manager="test", force=True)
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cr = {
        "apiVersion": CR_API,
        "kind": spec.KIND,
        "metadata": {"name": spec.OBJECT_NAME},
        "spec": {"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.20.0"}}},
    }
    server.create(cr)
    server.apply(
        {
            **cr,
            "status": {
                "observedGeneration": 1,
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "NotReady", "message": "driver not ready",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ]
            },
        },
        field_manager="metax-operator",
        subresource="status",
    )  # fmt: skip
    gpu_labels = {
        node_labels.GPU_INSTALLED: node_labels.TRUE,
        node_labels.GPU_COUNT: "2",
        node_labels.GPU_PRODUCT: "C500",
    }
    for name, labels in ((GPU_NODE, gpu_labels), (CPU_NODE, {})):
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        server.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            field_manager="kubelet",
            subresource="status",
        )
    for pod in (
        _pod("metax-gpu-discovery-1", "gpuLabel", GPU_NODE),
        _pod("metax-gpu-discovery-2", "gpuLabel", CPU_NODE),
        _pod("metax-gpu-label-1", "gpuLabel", GPU_NODE),
        _pod("metax-container-runtime-1", "runtime", GPU_NODE),
        _pod("metax-driver-1", "driver", GPU_NODE, ready=False),
    ):
        server.create({k: v for k, v in pod.items() if k != "status"})
        status = {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"], "status": pod["status"]}
        server.apply(status, field_manager="kubelet", subresource="status")
    server.create(
        {
            "apiVersion": k8s_events.API_VERSION,
            "kind": "Event",
            "metadata": {"name": "e1", "namespace": k8s_events.CLUSTER_SCOPED_NAMESPACE},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "metax-driver-manager",
            "reportingInstance": GPU_NODE,
            "action": components.signal(components.Component.DRIVER),
            "reason": event_reasons.DRIVER_LOAD_FAILED,
            "note": "metax 2.20.0: Invalid module format",
            "type": "Warning",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": GPU_NODE},
        }
    )
    return server


def test_one_node_as_a_table(api: InMemoryApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor.examine(api, [GPU_NODE], namespace=NS)
    out = capsys.readouterr().out
    assert code == doctor_report.EXIT_BROKEN
    assert "MetaX GPU found" in out and "2 x C500" in out
    assert f"{GPU_NODE}: first broken link: {FIRST[1]} ({FIRST[0]})" in out
    assert f"look closer: kubectl -n {NS} logs pod/{FIRST[2]}" in out


def test_one_node_as_json_carries_the_agents_event(api: InMemoryApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor.examine(api, [GPU_NODE], namespace=NS, output="json")
    document = json.loads(capsys.readouterr().out)
    assert code == doctor_report.EXIT_BROKEN and "summary" not in document
    (node,) = document["nodes"]
    driver = next(x for x in node["links"] if x["id"] == "driver-ready")
    assert driver["state"] == "broken"
    assert driver["evidence"].endswith("last Event DriverLoadFailed: metax 2.20.0: Invalid module format")


def test_the_cluster_summary(api: InMemoryApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor.examine(api, [], namespace=NS, output="json")
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert code == doctor_report.EXIT_BROKEN
    assert summary["nodes"] == {f"broken: {FIRST[0]}": [GPU_NODE], doctor_report.NO_GPU: [CPU_NODE]}
    assert summary["clusterOperator"]["conditions"][0]["message"] == "driver not ready"
    assert summary["rollout"] is None
    doctor.examine(api, [], namespace=NS)
    out = capsys.readouterr().out
    assert f"broken: {FIRST[0]}" in out and "no MetaX GPU" in out and "driver rollout: none" in out
    assert f"look closer: metax-operator doctor {GPU_NODE}" in out


def test_no_cluster_operator(capsys: pytest.CaptureFixture[str]) -> None:
    server = InMemoryApiServer()
    server.apply(crd.crd(), field_manager="test", force=True)
    server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": GPU_NODE}})
    assert doctor.examine(server, [GPU_NODE], namespace=NS, output="json") == doctor_report.EXIT_BROKEN
    first = json.loads(capsys.readouterr().out)["nodes"][0]["firstBroken"]
    assert first["id"] == "cluster-operator" and "is the chart installed?" in first["evidence"]


def test_an_unknown_node(api: InMemoryApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.examine(api, ["nope"], namespace=NS) == doctor_report.EXIT_USAGE
    assert "node 'nope' not found" in capsys.readouterr().err


def test_an_unknown_node_as_json(api: InMemoryApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """R-DOCTOR: with ``-o json`` every outcome is JSON on stdout, a failure too."""
    assert doctor.examine(api, ["nope"], namespace=NS, output="json") == doctor_report.EXIT_USAGE
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": documents.USAGE_ERROR, "message": "node 'nope' not found"}
    assert captured.err == ""


def test_an_unreadable_cluster(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    assert main.main(["doctor", "--kubeconfig", str(missing)]) == connection.EXIT_NO_CLUSTER
    err = capsys.readouterr().err
    assert err.startswith("error: no usable cluster configuration:") and str(missing) in err and "Traceback" not in err
