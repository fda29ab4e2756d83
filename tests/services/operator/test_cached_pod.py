"""`CachedPod`: the pod cache's slotted copy reads as the dict it replaced (issue 43 item 7, P3)."""

from __future__ import annotations

import pytest

from metax_core.cluster import gpu_nodes
from services.operator.cached_pod import CachedPod

LABELS = {"metax-tech.com/component": "driver"}
STATUS = {"phase": "Running", "ready": True, "restarts": 0, "waiting": ()}


def _cached(**extra: str) -> CachedPod:
    return CachedPod(name="d1", namespace="ns", labels=LABELS, node="gpu-1", status=STATUS, extra=extra or None)


def test_it_reads_as_the_pod_dict_with_only_the_fields_it_was_given() -> None:
    pod = _cached(deletionTimestamp="2026-01-01T00:00:00Z")
    as_dict = {
        "metadata": {"name": "d1", "namespace": "ns", "labels": LABELS, "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "gpu-1"},
        "status": STATUS,
    }
    assert pod == as_dict and as_dict == pod
    assert dict(pod) == as_dict and len(pod) == 3 and list(pod) == ["metadata", "spec", "status"]
    assert "deletionTimestamp" not in _cached()["metadata"]
    assert pod["status"] is STATUS and pod["metadata"]["labels"] is LABELS  # shared parts stay shared


def test_a_missing_field_reads_as_missing_not_as_an_empty_value() -> None:
    pod = _cached()
    assert pod.get("ownerReferences") is None and pod.get("kind", "absent") == "absent" and "kind" not in pod
    assert pod.get("spec") == {"nodeName": "gpu-1"} and "status" in pod
    with pytest.raises(KeyError, match="apiVersion"):
        pod["apiVersion"]


def test_the_core_pod_rules_read_it_as_they_read_a_dict() -> None:
    ready_elsewhere = CachedPod(name="d2", namespace="ns", labels=LABELS, node="gpu-2", status=STATUS)
    not_ready = CachedPod(name="d3", namespace="ns", labels=LABELS, node="gpu-3", status={**STATUS, "ready": False})
    assert [gpu_nodes.readiness_on_node(p) for p in (_cached(), ready_elsewhere, not_ready)] == [
        ("gpu-1", True),
        ("gpu-2", True),
        ("gpu-3", False),
    ]


def test_it_has_no_instance_dict() -> None:
    """Slots only: a `__dict__` per pod would cost more than the two dicts it replaced."""
    assert not hasattr(_cached(), "__dict__")
