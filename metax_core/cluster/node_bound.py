"""Which node agents' ServiceAccounts are node-bound, and what they may write: derived from the RBAC model.

Why a module of its own: `metax_core.cluster.node_policy` renders the ValidatingAdmissionPolicy (R-NODEBOUND)
that binds these writes to the token's own node; *which* accounts it matches and *which* operations on Nodes,
ResourceSlices and Events in ``default`` it checks come from `rbac.COMPONENT_RULES`, the model that renders the
agents' RBAC, so the two cannot drift apart. An account is node-bound when it may write Nodes or ResourceSlices;
one granted a write the policy cannot bind to a node makes `node_bound` raise `UnboundWrite`: a new permission
needs a decision in the policy first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from metax_core.cluster import rbac
from metax_core.components import access

NODES = ("", "nodes")
RESOURCE_SLICES = (access.DRA_API_GROUP, "resourceslices")
EVENTS = ("events.k8s.io", "events")
EVENT_GROUPS = frozenset({"", "events.k8s.io"})
"""Events are one resource served in two groups (the API server stores them together, so the policy's
``Equivalent`` match sees a core/v1 Event as an events.k8s.io/v1 one)."""

_OPERATIONS: Mapping[str, str] = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
"""Admission sees a patch as UPDATE and a collection delete as one DELETE per object."""
_ORDER = ("CREATE", "UPDATE", "DELETE")


class UnboundWrite(ValueError):
    """A node-bound account may write something the policy cannot bind to its node."""


@attrs.frozen
class NodeBound:
    """Who the policy binds and what it checks, derived from the RBAC model (`node_bound`)."""

    accounts: tuple[str, ...]
    """Every node-bound ServiceAccount (writes Nodes or ResourceSlices), in the model's order."""
    nodes: tuple[str, ...]
    """Those that may write Nodes."""
    resource_slices: tuple[str, ...]
    """Those that may write ResourceSlices."""
    events: tuple[str, ...]
    """Those that may write Events in ``default``."""
    operations: Mapping[tuple[str, str], tuple[str, ...]]
    """(API group, resource) → the admission operations some node-bound account may do on it."""


def _writes(rule: rbac.Rule) -> tuple[str, ...]:
    return tuple(_OPERATIONS[v] for v in rule.verbs if v in _OPERATIONS)


def _sorted(operations: Iterable[str]) -> tuple[str, ...]:
    found = set(operations)
    return tuple(o for o in _ORDER if o in found)


def node_bound(rules: Mapping[str, rbac.AccountRules] = rbac.COMPONENT_RULES) -> NodeBound:
    """The node-bound accounts of ``rules`` and what they may write. `UnboundWrite` when one may write, in
    the cluster or in ``default``, a resource that is not a Node, a ResourceSlice or an Event."""

    def writes(account: rbac.AccountRules, group: str, resource: str) -> bool:
        return any(r.group == group and resource in r.resources and _writes(r) for r in account.cluster)

    bound = [a for a in rules.values() if writes(a, *NODES) or writes(a, *RESOURCE_SLICES)]
    operations: dict[tuple[str, str], set[str]] = {}
    events: list[str] = []
    for account in bound:
        for scope, scoped in ((rbac.Scope.CLUSTER, account.cluster), (rbac.Scope.EVENTS, account.events)):
            for rule in scoped:
                if not _writes(rule):
                    continue
                for resource in rule.resources:
                    known = (rule.group, resource)
                    if rule.group in EVENT_GROUPS and resource == "events":
                        if scope is rbac.Scope.EVENTS:
                            operations.setdefault(EVENTS, set()).update(_writes(rule))
                            events.append(account.account)
                        continue  # Events outside `default` (claims' namespaces): not node-bound
                    if scope is rbac.Scope.CLUSTER and known in (NODES, RESOURCE_SLICES):
                        operations.setdefault(known, set()).update(_writes(rule))
                        continue
                    where = "cluster-wide" if scope is rbac.Scope.CLUSTER else f"in {rbac.EVENTS_NAMESPACE}"
                    raise UnboundWrite(
                        f"{account.account} may {'/'.join(rule.verbs)} {rule.group or 'core'}/{resource} {where}, "
                        "which the node-bound admission policy cannot bind to its node: bind it in "
                        "metax_core/cluster/node_policy.py "
                        "or drop the permission"
                    )
    return NodeBound(
        accounts=tuple(a.account for a in bound),
        nodes=tuple(a.account for a in bound if writes(a, *NODES)),
        resource_slices=tuple(a.account for a in bound if writes(a, *RESOURCE_SLICES)),
        events=tuple(dict.fromkeys(events)),
        operations={k: _sorted(v) for k, v in sorted(operations.items())},
    )
