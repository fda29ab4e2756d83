"""What the operator's MetaXGPUHealthy condition needs of the API, on both adapters (R-HEALTH,
`services.operator.gpu_health`): server-side apply on ``nodes/status`` with its own field manager merges a Node's
``status.conditions`` by ``type`` (``listType=map``), so the kubelet's conditions stay when ours is set, changed and
removed (applied without it)."""

from __future__ import annotations

from typing import Any

from tests.support.cluster import Cluster

MANAGER = "metax-operator-gpu-health"


def _conditions(cluster: Cluster, node: str) -> dict[str, str]:
    got = cluster.api.get("v1", "Node", node)
    return {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}


def _ours(node: str, status: str) -> dict[str, Any]:
    condition = {"type": "MetaXGPUHealthy", "status": status, "reason": "R", "message": "m"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {"conditions": [condition]}}


def test_our_condition_is_merged_by_type_beside_the_kubelets(cluster: Cluster) -> None:
    node = cluster.add_node()
    kubelet = {"type": "NodeDiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "ok"}
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {"conditions": [kubelet]}}
    cluster.api.apply(body, field_manager="kubelet-test", force=True, subresource="status")
    before = _conditions(cluster, node)
    assert before["NodeDiskPressure"] == "False"

    cluster.api.apply(_ours(node, "False"), field_manager=MANAGER, force=True, subresource="status")
    assert _conditions(cluster, node) == {**before, "MetaXGPUHealthy": "False"}
    cluster.api.apply(_ours(node, "True"), field_manager=MANAGER, force=True, subresource="status")
    assert _conditions(cluster, node) == {**before, "MetaXGPUHealthy": "True"}
    empty = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {}}
    cluster.api.apply(empty, field_manager=MANAGER, force=True, subresource="status")
    assert _conditions(cluster, node) == before
