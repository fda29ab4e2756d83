"""What the node and pod caches decode of each object (`metax_core.ports.cluster.Fields`): what the slim copies read.

Why: at 5,000 nodes the operator watches 35,000 pods, each event 8 KiB of JSON whose spec and managed fields it
never reads; decoding them whole was a quarter of its CPU in an install and most of its short-lived memory (issue
43 item 7). With these shapes the adapter decodes only the fields below (`metax_k8s.decoding`), and
`informers.slim_pod` / `slim_node` make their copies from that. Each shape must carry every field its slim
function reads: tests/services/operator/test_cached_fields.py checks that slimming a shaped object gives the
same copy as slimming the whole one, for pods and nodes recorded from real API servers. Values whose structure
the operator does not walk (labels, annotations, a node's conditions) are kept whole.
"""

from __future__ import annotations

from typing import Any, TypedDict

from metax_core.ports.cluster import ObjectFields, ObjectMetaFields


class _ProductMeta(ObjectMetaFields, total=False):
    labels: dict[str, str] | None
    annotations: dict[str, str] | None


class _NodeStatus(TypedDict, total=False):
    conditions: list[dict[str, Any]] | None  # the MetaXGPUHealthy condition, whole (`health.report.node_condition`)


class NodeFields(ObjectFields, total=False):
    """What `informers.slim_node` reads: name, labels, annotations, conditions."""

    metadata: _ProductMeta
    status: _NodeStatus | None


class _PodMeta(_ProductMeta, total=False):
    creationTimestamp: str | None
    deletionTimestamp: str | None


class _PodSpec(TypedDict, total=False):
    nodeName: str | None


class _PodCondition(TypedDict, total=False):
    type: str
    status: str


class _Waiting(TypedDict, total=False):
    reason: str | None


class _ContainerState(TypedDict, total=False):
    waiting: _Waiting | None


class _ContainerStatus(TypedDict, total=False):
    restartCount: int | None
    state: _ContainerState | None


class _PodStatus(TypedDict, total=False):
    phase: str | None
    startTime: str | None
    conditions: list[_PodCondition] | None
    containerStatuses: list[_ContainerStatus] | None


class PodFields(ObjectFields, total=False):
    """What `informers.slim_pod` reads: name, namespace, labels, annotations, creation and deletion times, node,
    phase, start time, the Ready condition, restart counts and waiting reasons."""

    metadata: _PodMeta
    spec: _PodSpec | None
    status: _PodStatus | None
