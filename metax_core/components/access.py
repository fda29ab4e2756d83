"""The Kubernetes permissions a component's workload declares (R-SECURITY): PolicyRules as data.

Why a module of its own: a component's declaration (`metax_core.components.catalogue`) names what its
ServiceAccount may do, next to its host paths and its environment, so adding a component is one record; the
Roles and bindings are rendered from those rules by `metax_core.cluster.rbac`, which also holds the operator's
own rules (a union of these). The shared rules every node agent needs are spelled here once.
"""

from __future__ import annotations

from typing import Any

import attrs

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")


@attrs.frozen
class Rule:
    """One PolicyRule: API group, resources, verbs, and optionally the only object names it applies to."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()

    def manifest(self) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "apiGroups": [self.group],
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.names:
            rule["resourceNames"] = list(self.names)
        return rule


@attrs.frozen
class Access:
    """What one workload's ServiceAccount may do, by where it applies: cluster-wide, in the operator's namespace,
    and in ``default`` (where Events about nodes live, `metax_core.cluster.rbac.EVENTS_NAMESPACE`)."""

    cluster: tuple[Rule, ...] = ()
    namespace: tuple[Rule, ...] = ()
    events: tuple[Rule, ...] = ()


NODE_LABELS = Rule("", ("nodes",), (*READ, "patch"))
"""An agent's own Node: it watches it by name (``fieldSelector=metadata.name``) and patches its labels and
annotations. RBAC cannot limit list/watch to a node whose name the role does not know (each pod runs on
another), so the read is cluster-wide; without list and watch the agent's watch is refused (403) and it only
notices a change at its slow resync (seen on the real node's pods, tests/e2e/test_product.py)."""
NODE_WATCH = Rule("", ("nodes",), READ)
EVENTS = (
    Rule("events.k8s.io", ("events",), ("get", "create", "patch", "delete")),
    Rule("", ("events",), ("create", "patch")),
)
"""Events about its node (in ``default``): created, patched when they repeat, and deleted when superseded."""

DRA_API_GROUP = "resource.k8s.io"


def config_map(name: str) -> tuple[Rule, ...]:
    """Read one ConfigMap by name. list/watch cannot be limited by name in RBAC unless the request names the object
    (fieldSelector metadata.name), which is how the agents watch their ConfigMap."""
    return (Rule("", ("configmaps",), READ, (name,)),)


def node_agent(*cluster: Rule, namespace: tuple[Rule, ...] = ()) -> Access:
    """A node agent's access: ``cluster`` and ``namespace`` rules, and Events about its node."""
    return Access(cluster=cluster, namespace=namespace, events=EVENTS)
