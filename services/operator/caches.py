"""The informers the reconciler reads, by name: one field per cache, and the pods filed by component.

Why a class of named fields: the reconcile reads a dozen caches, and a misspelt key in a mapping of informers
fails only when that line runs; a field fails at import and under mypy. `bootstrap` builds and `run` starts them.

Besides the named ones, every informer of a kind the operator applies is found by `Caches.lookup`: the workloads,
Services and ConfigMaps in the operator's namespace and the components' RBAC objects (`metax_core.cluster.rbac`)
wherever they live, so that an owned object deleted or edited by hand wakes the reconciler at once and a
steady-state reconcile reads none of them from the API server.

The pod cache is filed by the ``app.kubernetes.io/component`` label (`metax_core.wire.meta.COMPONENT_LABEL`):
the rollout reads the driver's pods and R-VF the gpu-device pods, each without a scan of every cached pod; and
tallied by each pod's node and whether it is Ready (`metax_core.cluster.gpu_nodes.readiness_on_node`), from which
the status's ``readyNodes`` counts the nodes where every pod of ours is Ready. The
node cache is filed by whether a node says anything about its GPUs' health (`health_of`): at 5,000 nodes a
reconcile's GPU health looks at the few that do.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from metax_core.components import Component
from metax_core.health import report
from metax_core.ports.cluster import RawObject
from metax_core.wire import meta
from services.operator.informers import Informer


def component_of(obj: RawObject) -> str:
    """The component an object belongs to, by its label ("" for none): what the pod cache is filed under."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(meta.COMPONENT_LABEL) or "")


HEALTH = "health"


def health_of(node: RawObject) -> str | None:
    """`HEALTH` for a node with a GPU health report or a ``MetaXGPUHealthy`` condition, None (not filed) for the
    others: GPU health looks at the few nodes that say something, not at every node."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return HEALTH if annotations.get(report.ANNOTATION) or report.node_condition(node) is not None else None


@attrs.define(eq=False)
class Caches:
    cluster_operator: Informer
    configmaps: Informer
    nodes: Informer
    """Every node, slimmed, filed by `health_of` (built with ``index_by=health_of``)."""
    daemonsets: Informer
    deployments: Informer
    services: Informer
    network_policies: Informer
    runtime_classes: Informer
    device_classes: Informer
    pods: Informer
    """Our pods in the operator's namespace, filed by component and tallied by the node they make ready (built with
    ``index_by=component_of``, ``tally_by=gpu_nodes.readiness_on_node``)."""
    service_monitor_crd: Informer
    rbac: Sequence[Informer] = ()
    """The components' RBAC objects, one informer per kind and scope (`metax_core.cluster.rbac.locations`)."""
    _by_scope: dict[tuple[str, str], Informer] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._by_scope = {(i.kind, i.namespace or ""): i for i in self.all}

    @property
    def all(self) -> tuple[Informer, ...]:
        """Every informer: what `run.Operator` starts, waits for and stops."""
        named = (
            self.cluster_operator,
            self.configmaps,
            self.nodes,
            self.daemonsets,
            self.deployments,
            self.services,
            self.network_policies,
            self.runtime_classes,
            self.device_classes,
            self.pods,
            self.service_monitor_crd,
        )
        return (*named, *self.rbac)

    def health_nodes(self) -> list[RawObject]:
        """The cached nodes with a GPU health report or condition (`health_of`), from the index."""
        return self.nodes.indexed(HEALTH)

    def pods_of(self, component: Component) -> list[RawObject]:
        """The cached pods of ``component`` (its label), from the index."""
        return self.pods.indexed(component.value)

    def pod_readiness_by_node(self) -> frozenset[tuple[str, bool]]:
        """Each (node, Ready) pair some pod of ours has (`gpu_nodes.readiness_on_node`), from the tally."""
        return self.pods.tallied()

    def lookup(self, kind: str, name: str, namespace: str | None) -> RawObject | None:
        """The cached ``kind`` ``namespace/name`` with its apiVersion and kind, or None (not cached, or absent)."""
        informer = self._by_scope.get((kind, namespace or ""))
        if informer is None:
            return None
        found = informer.get(name, namespace)
        return None if found is None else {"apiVersion": informer.api_version, "kind": kind, **found}
