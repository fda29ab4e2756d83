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


def test_a_gpu_node_is_ready_with_one_ready_pod_of_ours() -> None:
    pods = [
        pod("n1", ready=True),
        pod("n1", ready=False),  # another pod on n1 still starting: n1 is ready all the same
        pod("n2", ready=False),
        pod(None, ready=True),  # not scheduled yet
        pod("cpu-node", ready=True),  # not a GPU node
    ]
    ready = {n for p in pods if (n := gpu_nodes.ready_node(p)) is not None}
    assert ready == {"n1", "cpu-node"}
    assert gpu_nodes.ready_count(["n1", "n2", "n3"], ready) == 1
    assert gpu_nodes.ready_count(["n1", "n2", "n3"], ready | {gpu_nodes.ready_node(pod("n3", ready=True))}) == 2
    assert gpu_nodes.ready_count([], ready) == 0
