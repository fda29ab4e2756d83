"""One level-triggered reconcile of ``cluster-operator``: read everything, decide in the core, apply, report.

Why a module of its own: this is the operator's whole job in one place, in order:

1. the object is gone → nothing to do; being deleted → the `finalizer`: `uninstall_wait` (the nodes' agents
   undo and answer, bounded), then `cleanup`, then release it;
2. our finalizer is on it (a metadata write, never ``spec``: the operator owns no spec field, issue 16);
3. the spec is parsed; an invalid spec changes nothing and reports ``Degraded`` with every field path;
4. ConfigMaps: ``driver-config`` created once with defaults, ``metax-vfio-config`` rendered from the spec;
5. every component state, in R-DEP order (server-side apply, one field manager, `applier`); the driver
   DaemonSet's template comes from the rollout decision (carried out by `rollout_apply` and `drainer`); objects
   of disabled or blocked components are pruned, their ServiceAccounts and RBAC too (`pruning`: checked once
   per disable, not on every reconcile);
6. a node whose VF count in ``driver-config`` changed gets its gpu-device pod recreated (R-VF, `vf_changes`);
7. the roll-up into ``status`` (`cr_status`: written only when it differs from the stored one, zero writes
   when idle).

It returns when to run again (the rollout's recheck time), or None. It reads the caches (`caches`) and reaches
the cluster only through the ports it is given, every write counted once (`writes`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core import components, release
from metax_core.cluster import configmaps, crd_policy, gpu_nodes, gpu_workloads, image_refs, render_settings, workloads
from metax_core.cluster import status as cluster_status
from metax_core.components import Component
from metax_core.errors import FieldError, InvalidSpec
from metax_core.ports.cluster import Events, EventType, NodeCordons, NodeMetadata, Objects, RawObject
from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import fleet
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_core.wire import event_reasons, meta
from metax_k8s.crd import sync as crd_sync
from services.operator import (
    applier,
    cr_status,
    drainer,
    finalizer,
    gpu_health,
    pruning,
    rollout_apply,
    rollout_driver,
    states,
    vf_changes,
    writes,
)
from services.operator.caches import Caches
from services.operator.settings import Settings

log = logging.getLogger(__name__)
CRD_RECHECK = 30.0
"""Seconds until a reconcile that found the CRD older than the operator tries to bring it up to date again."""

CR_API = cr_status.CR_API
CONFIRM_ANNOTATION = meta.ROLLOUT_CONFIRM


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        *,
        objects: Objects,
        cordons: NodeCordons,
        events: Events,
        nodes: NodeMetadata,
        caches: Caches,
        clock: Callable[[], dt.datetime],
    ) -> None:
        """``objects`` and ``nodes`` are used through one counter (`writes`): every write of the operator is in
        ``tally``, whichever part made it."""
        self.settings = settings
        self.tally = writes.Tally()
        self.objects = writes.CountingObjects(objects, self.tally)
        self.events = events
        self.nodes = writes.CountingNodes(nodes, self.tally)
        self.caches = caches
        self.clock = clock
        self.applier = applier.Applier(self.objects, events, field_manager=settings.field_manager)
        self.drainer = drainer.Drainer(self.objects, cordons, events)
        self.gpu_health = gpu_health.GpuHealth(self.objects, self.nodes, events)
        self.finalizer = finalizer.Finalizer(
            settings,
            objects=self.objects,
            nodes=self.nodes,
            events=events,
            caches=caches,
            apply=self.applier,
            health=self.gpu_health,
            clock=clock,
        )
        self.pruner = pruning.Pruner(self.objects, self.applier, caches, namespace=settings.namespace)
        self.render_settings = render_settings.RenderSettings(
            namespace=settings.namespace,
            version=settings.version,
            host_path_prefix=settings.host_path_prefix,
            image_digests=image_refs.decode_digests(settings.image_digests),
        )
        self.release = release.running()
        self.crd: crd_sync.CrdState | None = None
        """What the CRD serves, once `crd_sync.ensure` brought it to this release (checked again while not)."""

    @property
    def status_writes(self) -> int:
        """Writes of ``cluster-operator``'s status so far (the roll-up, the uninstall's condition)."""
        return self.tally.count(writes.STATUS, spec.KIND)

    # -- helpers --------------------------------------------------------------------------------------------

    def _lookup(self, kind: str, name: str) -> RawObject | None:
        """An object of the operator's namespace from the cache."""
        return self.caches.lookup(kind, name, self.settings.namespace)

    def _gpu_nodes(self) -> list[str]:
        return gpu_nodes.names(self.caches.nodes.items())

    # -- the reconcile --------------------------------------------------------------------------------------

    def reconcile(self) -> float | None:
        cr = self.objects.get(CR_API, spec.KIND, spec.OBJECT_NAME)
        if cr is None:
            return None
        metadata = cr.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return self.finalizer.finalize(cr)
        self.finalizer.ensure(cr)
        now = self.clock()
        generation = int(metadata.get("generation") or 0)
        previous = cluster_status.conditions_from_document(cr.get("status"))
        crd = self._ensure_crd(cr)
        if crd.problem:  # an older schema would prune this release's fields from every write: apply nothing
            rolled = cluster_status.roll_up(
                generation=generation, results=(), previous=previous, now=now, crd_outdated=crd.problem
            )
            if self._write_status(cr, rolled, None, None):
                self.events.emit(
                    cr_status.cr_ref(cr),
                    reason=event_reasons.CRD_OUTDATED,
                    message=crd.problem,
                    type=EventType.WARNING,
                    action="Upgrade",
                )
            return CRD_RECHECK
        try:
            s = validation.parse(cr)
        except InvalidSpec as exc:
            note = crd_policy.newer_fields_note(crd.release, self.release)
            if note:
                exc = InvalidSpec([*exc.errors, FieldError("", note)])
            rolled = cluster_status.roll_up(generation=generation, results=(), previous=previous, now=now, invalid=exc)
            if self._write_status(cr, rolled, None, None):
                self.events.emit(
                    cr_status.cr_ref(cr),
                    reason=event_reasons.INVALID_SPEC,
                    message=str(exc),
                    type=EventType.WARNING,
                    action="Validate",
                )
            return None

        self.applier.create_once(
            configmaps.driver_config_map(self.settings.namespace),
            self._lookup("ConfigMap", workloads.DRIVER_CONFIG_MAP),
        )
        self.applier.apply(
            configmaps.vfio_config_map(s, self.settings.namespace), self._lookup("ConfigMap", workloads.VFIO_CONFIG_MAP)
        )

        monitoring = bool(self.caches.service_monitor_crd.items())  # watched: installing it wakes a reconcile
        rendered = workloads.render(s, attrs.evolve(self.render_settings, service_monitor=monitoring))
        objects = list(rendered.objects)
        gpu = self._gpu_nodes()  # once: the rollout and the status count the same nodes
        outcome, look = None, None
        index = workloads.driver_daemonset_index(objects)
        if index is not None:
            outcome, look = self._rollout(s, cr, objects[index], now, gpu)
            objects[index] = outcome.manifest

        results = states.sync_all(rendered.plan.deploy, objects, self.applier, self.caches.lookup)
        results.extend(cluster_status.blocked(b) for b in rendered.plan.blocked)
        results.extend(cluster_status.disabled(c) for c in rendered.plan.disabled)
        wanted = {(str(o["kind"]), str(o["metadata"]["name"])) for o in objects}
        self.pruner.prune(wanted, rendered.plan, objects, monitoring)
        self.pruner.withdraw_slices_when_dra_is_off(Component.DRA_DRIVER in rendered.plan.deploy)

        if outcome is not None:
            ref, ns = cr_status.cr_ref(cr), self.settings.namespace
            rollout_apply.apply(outcome, objects=self.objects, events=self.events, ref=ref, namespace=ns)
            released = {n.name: n.message for n in outcome.status.status.released_nodes}
            self.drainer.apply(outcome.drain, outcome.uncordon, look, now, released)
        vf_nums = None  # R-VF
        if Component.GPU_DEVICE in rendered.plan.deploy:
            vf_nums = vf_changes.recreate(
                cr, caches=self.caches, objects=self.objects, events=self.events, namespace=self.settings.namespace
            )
        retry = self.gpu_health.apply(self.caches.health_nodes(), s.gpu_device.remediation, now)

        rolled = cluster_status.roll_up(
            generation=generation,
            results=results,
            previous=previous,
            now=now,
            rollout=outcome.status if outcome else None,
            ready_nodes=self._ready_nodes(gpu),
            total_nodes=len(gpu),
        )
        self._write_status(cr, rolled, outcome.status if outcome else None, vf_nums)
        if outcome is not None and outcome.requeue_after is not None:
            return max(0.0, min(outcome.requeue_after.total_seconds(), retry or float("inf")))
        return retry

    def _ensure_crd(self, cr: RawObject) -> crd_sync.CrdState:
        """The CRD at this release's schema or newer (`crd_sync.ensure` until it is; then once per start)."""
        if self.crd is None or self.crd.problem:
            self.crd = crd_sync.ensure(self.objects, self.release, field_manager=self.settings.field_manager)
            if self.crd.applied:
                self.events.emit(
                    cr_status.cr_ref(cr),
                    reason=event_reasons.CRD_UPGRADED,
                    message=f"the ClusterOperator CRD now serves release {self.release}'s schema",
                    action="Upgrade",
                )
        return self.crd

    def _ready_nodes(self, gpu: list[str]) -> int:
        return gpu_nodes.ready_count(gpu, self.caches.pod_readiness_by_node())

    # -- pieces ---------------------------------------------------------------------------------------------

    def _rollout(
        self,
        s: spec.ClusterOperatorSpec,
        cr: RawObject,
        desired: Mapping[str, Any],
        now: dt.datetime,
        gpu: list[str],
    ) -> tuple[rollout_driver.Outcome, drainer.Look | None]:
        """The rollout's decision, and what the drain read for it (applied after the objects, `drainer.apply`);
        ``gpu``: the GPU nodes by name (`gpu_nodes.names`, read once per reconcile)."""
        driver_pods = self.caches.pods_of(Component.DRIVER)
        live_ds = self._lookup("DaemonSet", components.DRIVER_DAEMONSET)
        busy: set[str] = set()
        prev = rollout_driver.previous_status(cr.get("status"))
        look = None  # what the drain reads, used again when the decision is applied
        if (prev is not None and prev.upgrading) or fleet.behind(desired, driver_pods):
            look = self.drainer.look(rollout_drain.draining(prev), s.driver.upgrade_policy.drain)
            busy = self._busy_nodes(look.claims)  # only when a driver pod may be restarted: a cluster-wide list
        return rollout_driver.drive(
            s=s,
            desired=desired,
            live_ds=live_ds,
            driver_pods=driver_pods,
            gpu_nodes=gpu if live_ds is not None else [],
            busy=busy,
            cr_status=cr.get("status"),
            now=now,
            ready_timeout=self.settings.driver_ready_timeout,
            crash_restarts=self.settings.crash_loop_restarts,
            confirmation=((cr.get("metadata") or {}).get("annotations") or {}).get(CONFIRM_ANNOTATION),
            agent_max_unavailable=fleet.agent_pace(s.agent_update.max_unavailable, len(driver_pods)),
            nodes=self.caches.nodes.items(),
            drain_blockers=look.blockers() if look is not None else {},
        ), look

    def _busy_nodes(self, claims: frozenset[gpu_workloads.Claim]) -> set[str]:
        """Nodes with GPU workloads: one paged list of running pods that are not ours, only while a rollout may act.

        Not a watch: a cluster-wide pod cache would hold every pod of the cluster for a question asked only
        during a rollout. The selector leaves our own pods to the server; each page is reduced to the nodes of
        the pods that hold MetaX devices (a metax-tech.com/* resource, or one of ``claims``) before the next one
        arrives.
        """
        listing = self.objects.list(
            "v1",
            "Pod",
            label_selector=f"!{workloads.COMPONENT_LABEL}",
            field_selector="status.phase=Running",
            transform=gpu_workloads.workload_nodes(claims),
        )
        return {str(item["nodeName"]) for item in listing.items}

    def _write_status(
        self,
        cr: RawObject,
        rolled: cluster_status.ClusterStatus,
        upgrade: rollout_status.UpgradeStatus | None,
        vf_nums: dict[str, int] | None,
    ) -> bool:
        versions = {"operator": self.release, "crd": (self.crd.release if self.crd else None) or ""}
        return cr_status.write(
            self.objects,
            cr,
            rolled,
            upgrade=upgrade,
            vf_nums=vf_nums,
            versions=versions,
            field_manager=self.settings.field_manager,
        )
