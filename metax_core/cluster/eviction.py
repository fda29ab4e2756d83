"""Which pods a drain evicts from a node, and what keeps the node from draining (issue 41 item 3; R-ROLLOUT;
docs/rollout.md "Draining").

Why it exists: a drain that evicts the wrong pod loses work, and one that cannot tell why a node does not empty
leaves an administrator guessing. The rollout (`metax_core.rollout.drain`) decides *which nodes* to drain; this
decides, for one node, *which pods*: only GPU workloads (`gpu_workloads.workload_node`: pods that are not the
product's own and hold MetaX devices, through the device plugin or a DRA claim), and of those only the ones
``upgradePolicy.drain`` allows:

- a pod without the ``podSelector`` labels stays (it blocks the drain);
- a pod of a DaemonSet stays (its controller would put it back on the node at once);
- a pod no controller recreates (bare) stays unless ``force``;
- a pod with an ``emptyDir`` volume stays unless ``deleteEmptyDir`` (its data would be lost);
- a pod already terminating is leaving by itself: neither evicted again nor a blocker.

The operator evicts the chosen pods through the Eviction API, so PodDisruptionBudgets hold: a budget that allows
no disruption now is named as a blocker here (from its status, as the disruption controller last wrote it), and
the API server refuses the eviction (429) until it allows one. The blockers become the node's
`metax_core.rollout.model.Node.drain_blocker`, which the status shows. Pure: pods and budgets arrive as the API
returns them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.cluster import gpu_workloads
from metax_core.spec import model as spec

BLOCKERS_SHOWN = 3
"""Blockers named in a node's text (the rest counted): the status must stay readable on a node with many pods."""


@attrs.frozen
class NodeEviction:
    """One node's drain: the pods to evict (namespace, name) and what blocks the drain, in words."""

    evict: tuple[tuple[str, str], ...] = ()
    blockers: tuple[str, ...] = ()

    def describe(self) -> str:
        shown = "; ".join(self.blockers[:BLOCKERS_SHOWN])
        more = len(self.blockers) - BLOCKERS_SHOWN
        return shown + (f"; and {more} more" if more > 0 else "")


def _name(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((o for o in owners if o.get("controller")), None)


def _empty_dirs(pod: Mapping[str, Any]) -> list[str]:
    return [str(v.get("name")) for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v]


def refusal(pod: Mapping[str, Any], drain: spec.Drain) -> str | None:
    """Why ``drain`` does not evict this GPU pod (None: it may be evicted)."""
    namespace, name = _name(pod)
    labels = (pod.get("metadata") or {}).get("labels") or {}
    wanted = drain.pod_selector or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return f"pod {namespace}/{name} lacks the labels of drain.podSelector"
    owner = _controller(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return f"pod {namespace}/{name} of DaemonSet {owner.get('name')} would come back on the node"
    if owner is None and not drain.force:
        return f"pod {namespace}/{name} has no controller to recreate it (drain.force evicts it)"
    volumes = _empty_dirs(pod)
    if volumes and not drain.delete_empty_dir:
        shown = ", ".join(volumes)
        return f"pod {namespace}/{name} keeps data in emptyDir {shown} (drain.deleteEmptyDir evicts it)"
    return None


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (an empty selector selects everything; a null one nothing)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement.get("key"), requirement.get("operator")
        values = requirement.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def blocking_budgets(pod: Mapping[str, Any], budgets: Iterable[Mapping[str, Any]]) -> list[str]:
    """The PodDisruptionBudgets of the pod's namespace that select it and allow no disruption now."""
    namespace, _ = _name(pod)
    labels = (pod.get("metadata") or {}).get("labels") or {}
    found = []
    for budget in budgets:
        metadata = budget.get("metadata") or {}
        if (metadata.get("namespace") or "default") != namespace:
            continue
        if not selects((budget.get("spec") or {}).get("selector"), labels):
            continue
        if int((budget.get("status") or {}).get("disruptionsAllowed") or 0) < 1:
            found.append(f"{namespace}/{metadata.get('name')}")
    return found


def plan(
    pods: Iterable[Mapping[str, Any]],
    drain: spec.Drain,
    budgets: Sequence[Mapping[str, Any]],
    claimed: Collection[gpu_workloads.Claim] = (),
) -> NodeEviction:
    """The pods of one node to evict now, and what blocks its drain; ``claimed``: the ResourceClaims holding MetaX
    devices (`gpu_workloads.dra_claims`)."""
    evict: list[tuple[str, str]] = []
    blockers: list[str] = []
    for pod in pods:
        if gpu_workloads.workload_node(pod, claimed) is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        why = refusal(pod, drain)
        if why is not None:
            blockers.append(why)
            continue
        evict.append(_name(pod))
        for budget in blocking_budgets(pod, budgets):
            namespace, name = _name(pod)
            blockers.append(f"PodDisruptionBudget {budget} allows no disruption of pod {namespace}/{name} now")
    return NodeEviction(tuple(sorted(evict)), tuple(blockers))
