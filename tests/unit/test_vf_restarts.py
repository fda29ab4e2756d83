"""Which gpu-device pods the operator recreates after a driver-config edit (R-VF, `metax_core.cluster.vf_restarts`).

Aspects: a node whose recorded count differs from the ConfigMap's gets its pod recreated, old → new; a node
not recorded yet, a pod already terminating and a node whose count is unchanged are left alone (but counted);
an unlisted node counts 0, as driver-manager resolves it (`driver_config.for_node`); a broken ConfigMap recreates
nothing and keeps the recorded counts (driver-manager keeps its last valid one); only gpu-device pods bound to a
node are read from the pod list.
"""

from __future__ import annotations

from typing import Any

from metax_core.cluster import vf_restarts
from metax_core.cluster.vf_restarts import GpuDevicePod, Recreation
from metax_core.node import driver_config
from metax_core.wire import meta


def config(text: str) -> driver_config.DriverConfig:
    return driver_config.parse({driver_config.NODE_VFNUMS: text})


def test_a_changed_count_recreates_that_nodes_pod_only() -> None:
    pods = [GpuDevicePod("gd-a", "a"), GpuDevicePod("gd-b", "b"), GpuDevicePod("gd-c", "c")]
    decision = vf_restarts.decide(config("nodes:\n  a:\n    vfnum: 4\n  b:\n    vfnum: 2\n"), {"a": 0, "b": 2}, pods)
    assert decision.recreate == (Recreation("a", "gd-a", 0, 4),)
    assert decision.seen == {"a": 4, "b": 2, "c": 0}  # c is recorded from now on, its pod started with 0


def test_an_unlisted_node_counts_zero_and_a_terminating_pod_is_left_alone() -> None:
    pods = [GpuDevicePod("gd-a", "a"), GpuDevicePod("gd-b", "b", terminating=True)]
    decision = vf_restarts.decide(config(""), {"a": 2, "b": 2}, pods)
    assert decision.recreate == (Recreation("a", "gd-a", 2, 0),)
    assert decision.seen == {"a": 0, "b": 0}


def test_a_broken_driver_config_recreates_nothing_and_keeps_the_recorded_counts() -> None:
    """driver-manager keeps its last valid driver-config and changes no VF: no pod restarts for a broken edit."""
    broken = vf_restarts.config_or_none({"node-vfnums": "nodes: [oops"})
    assert broken is None
    pods = [GpuDevicePod("gd-a", "a"), GpuDevicePod("gd-b", "b"), GpuDevicePod("gd-new", "new")]
    decision = vf_restarts.decide(broken, {"a": 4, "b": 0, "gone": 2}, pods)
    assert decision.recreate == ()
    assert decision.seen == {"a": 4, "b": 0}  # the new node is recorded once the ConfigMap parses again
    assert vf_restarts.config_or_none(None) == driver_config.DriverConfig()  # missing: empty, as driver-manager
    assert vf_restarts.config_or_empty({"node-vfnums": "nodes: [oops"}) == driver_config.DriverConfig()
    assert vf_restarts.config_or_empty({"node-vfnums": "nodes:\n  a:\n    vfnum: 4\n"}).node_vfnums == {"a": 4}


def _pod(name: str, component: str, node: str | None, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {meta.COMPONENT_LABEL: component}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


def test_only_bound_gpu_device_pods_are_read() -> None:
    pods = [
        _pod("gd-a", "gpuDevice", "a"),
        _pod("gd-b", "gpuDevice", "b", deleting=True),
        _pod("gd-pending", "gpuDevice", None),
        _pod("driver-a", "driver", "a"),
    ]
    assert vf_restarts.gpu_device_pods(pods) == [GpuDevicePod("gd-a", "a"), GpuDevicePod("gd-b", "b", True)]
