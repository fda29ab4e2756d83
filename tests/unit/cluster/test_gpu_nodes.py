"""The GPU nodes and the ready ones (metax_core.cluster.gpu_nodes; ``status.readyNodes`` / ``totalNodes``).

Aspects: a GPU node is labelled ``metax-tech.com/gpu.installed=true`` exactly (another value, another label or no
labels is not one), by name; a GPU node is ready with at least one Ready pod on it, whatever the others; a pod
not Ready, not scheduled yet, or on a node that is not a GPU node counts for nothing.
"""

from __future__ import annotations

from typing import Any

from metax_core.cluster import gpu_nodes
from metax_core.node import labels as node_labels


def node(name: str, labels: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def pod(node_name: str | None, *, ready: bool) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{node_name}"}, "spec": {"nodeName": node_name}, "status": {"ready": ready}}


def test_gpu_nodes_are_the_labelled_ones_by_name() -> None:
    gpu = {node_labels.GPU_INSTALLED: "true"}
    nodes = [
        node("n3", gpu),
        node("n1", {**gpu, "other": "x"}),
        node("n2", {node_labels.GPU_INSTALLED: "false"}),
        node("n4", {"other": "true"}),
        node("n5", None),
    ]
    assert gpu_nodes.names(nodes) == ["n1", "n3"]
    assert gpu_nodes.names([]) == []


def test_a_gpu_node_is_ready_when_every_pod_of_ours_on_it_is_ready() -> None:
    pods = [
        pod("n1", ready=True),
        pod("n1", ready=True),
        pod("n2", ready=True),
        pod("n2", ready=False),  # another pod on n2 still starting (or crash-looping): n2 is not ready
        pod("n3", ready=False),
        pod(None, ready=True),  # not scheduled yet: counts for no node
        pod("cpu-node", ready=True),  # not a GPU node
    ]
    seen = {r for p in pods if (r := gpu_nodes.readiness_on_node(p)) is not None}
    assert seen == {("n1", True), ("n2", True), ("n2", False), ("n3", False), ("cpu-node", True)}
    assert gpu_nodes.ready_count(["n1", "n2", "n3", "n4"], seen) == 1  # n4: no pod of ours at all
    assert gpu_nodes.ready_count(["n1", "n2", "n3"], seen - {("n2", False)}) == 2  # n2's last pod became Ready
    assert gpu_nodes.ready_count([], seen) == 0
