"""Whether a pod template lands on a node with given labels, as kube-scheduler's NodeAffinity filter decides:
its ``nodeSelector`` (every key equal) and its required node affinity (any term; a term's expressions all).

Why the tests have it: R-DRA's promise is that each GPU node is served by exactly one of two DaemonSets, and
that promise is about this evaluation of the rendered manifests, not about the strings in them. The real
scheduler's verdict is checked against the real control plane in tests/integration/operator/test_dra_apiserver.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One node selector requirement (``NotIn`` and ``DoesNotExist`` also match a node without the key)."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} is not handled by this matcher")


def lands_on(pod_spec: Mapping[str, Any], labels: Mapping[str, str], node_name: str = "node") -> bool:
    """Whether the scheduler's node filters for labels let ``pod_spec`` onto the node."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    fields = {"metadata.name": node_name}
    return any(
        all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        and all(expression_matches(e, fields) for e in term.get("matchFields") or [])
        for term in required.get("nodeSelectorTerms") or []
    )
