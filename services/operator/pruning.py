"""What the operator removes while ``cluster-operator`` lives: objects no longer rendered, RBAC of components
not deployed, and the DRA driver's ResourceSlices when the driver is switched off (R-DEP, R-DRA).

Why a module of its own: pruning is the one place a reconcile deletes what it once applied, so it states which
objects it looks at (the caches of the kinds the operator renders, plus the exporter's ServiceMonitor where the
cluster serves them) and why each goes (the blocked component's reason, or "disabled"). Only objects carrying our
managed-by label are ever deleted (`applier.Applier.prune`); what was made sure gone is not asked about again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core import components
from metax_core.cluster import network_policies, rbac, supporting, workloads
from metax_core.components import Component
from metax_core.ports.cluster import Objects
from services.operator import applier, cleanup
from services.operator.caches import Caches


class Pruner:
    def __init__(self, objects: Objects, apply: applier.Applier, caches: Caches, *, namespace: str) -> None:
        self.objects = objects
        self.applier = apply
        self.caches = caches
        self.namespace = namespace
        self._dra_on: bool | None = None
        """Whether the DRA driver was deployed at the last reconcile (None: none yet)."""

    def prune(
        self,
        wanted: set[tuple[str, str]],
        plan: components.DeployPlan,
        rendered: list[Mapping[str, Any]],
        monitoring: bool,
    ) -> None:
        """Workloads that are not wanted, then the RBAC of every component not deployed (R-DEP)."""
        why_by_component = {b.component.value: b.reason for b in plan.blocked}
        for cache, kind, api_version in (
            (self.caches.daemonsets, "DaemonSet", "apps/v1"),
            (self.caches.deployments, "Deployment", "apps/v1"),
            (self.caches.services, "Service", "v1"),
            (self.caches.network_policies, network_policies.KIND, network_policies.API_VERSION),
        ):
            for obj in cache.items():
                name = str(obj["metadata"]["name"])
                if (kind, name) in wanted:
                    continue
                component = (obj["metadata"].get("labels") or {}).get(workloads.COMPONENT_LABEL, "")
                why = why_by_component.get(component, f"component {component or '?'} is disabled")
                self.applier.prune({"apiVersion": api_version, "kind": kind, **obj}, why)
        if monitoring and ("ServiceMonitor", supporting.EXPORTER_NAME) not in wanted:
            live = cleanup.service_monitor(self.objects, self.namespace)
            if live is not None:
                why = why_by_component.get(Component.EXPORTER.value, "no exporter Service to scrape")
                self.applier.prune(live, why)
        undeployed = [*plan.disabled, *(b.component for b in plan.blocked)]
        for component in undeployed:
            why = why_by_component.get(component.value, f"component {component.value} is disabled")
            self.applier.prune_absent(rbac.to_remove([component], self.namespace, rendered), why)
            self.applier.prune_absent(supporting.cluster_objects(component), why)

    def withdraw_slices_when_dra_is_off(self, dra_on: bool) -> None:
        """Once per operator start and at each switch to off: the driver's slices go with its DaemonSet (a
        driver stopping cannot tell a restart from its removal, so it keeps them). Reads nothing while on."""
        if not dra_on and self._dra_on is not False:
            cleanup.withdraw_slices(self.objects)
        self._dra_on = dra_on
