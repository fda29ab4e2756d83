"""One level-triggered reconcile of ``cluster-operator``: read everything, decide in the core, apply, report.

Why a module of its own: this is the operator's whole job in one place, in order:

1. the object is gone → nothing to do; being deleted → the finalizer: `uninstall_wait` (the nodes' agents undo
   and answer, bounded), then `cleanup`, then release it;
2. our finalizer is on it (a metadata write, never ``spec``: the operator owns no spec field, issue 16);
3. the spec is parsed; an invalid spec changes nothing and reports ``Degraded`` with every field path;
4. ConfigMaps: ``driver-config`` created once with defaults, ``metax-vfio-config`` rendered from the spec;
5. every component state, in R-DEP order (server-side apply, one field manager); the driver DaemonSet's
   template comes from the rollout decision; objects of disabled or blocked components are pruned, their
   ServiceAccounts and RBAC too (checked once per disable, not on every reconcile);
6. a node whose VF count in ``driver-config`` changed gets its gpu-device pod recreated (R-VF), that pod only;
7. the roll-up into ``status`` (written only when it differs from the stored one: zero writes when idle).

It returns when to run again (the rollout's recheck time), or None.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core import release
from metax_core.cluster import (
    components,
    configmaps,
    crd_policy,
    gpu_workloads,
    image_refs,
    network_policies,
    rbac,
    vf_restarts,
    workloads,
)
from metax_core.cluster import status as cluster_status
from metax_core.cluster.components import Component
from metax_core.errors import Conflict, FieldError, InvalidSpec, MetaxError, NotFound
from metax_core.ports.cluster import Events, EventType, NodeMetadata, ObjectRef, Objects, RawObject
from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import fleet
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_core.wire import event_reasons, meta
from metax_k8s import crd_sync
from metax_k8s.api import Api
from services.operator import applier, cleanup, drainer, gpu_health, rollout_driver, states, uninstall_wait
from services.operator.informers import Informer
from services.operator.settings import Settings

log = logging.getLogger(__name__)
CRD_RECHECK = 30.0
"""Seconds until a reconcile that found the CRD older than the operator tries to bring it up to date again."""

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
CONFIRM_ANNOTATION = meta.ROLLOUT_CONFIRM
EVENTS_BEFORE_GONE = 10.0
"""How long the finalizer waits for the uninstall's Events to be recorded before it lets the object go."""


class Caches:
    """The informers the reconciler reads (built and started by `run`).

    Besides the named ones, every informer of a kind the operator applies is found by `lookup`: the workloads,
    Services and ConfigMaps in the operator's namespace and the components' RBAC objects (`metax_core.cluster.rbac`)
    wherever they live, so that an owned object deleted or edited by hand wakes the reconciler at once and a
    steady-state reconcile reads none of them from the API server.
    """

    def __init__(self, **informers: Informer) -> None:
        self.cluster_operator = informers["cluster_operator"]
        self.configmaps = informers["configmaps"]
        self.nodes = informers["nodes"]
        self.daemonsets = informers["daemonsets"]
        self.deployments = informers["deployments"]
        self.services = informers["services"]
        self.network_policies = informers["network_policies"]
        self.pods = informers["pods"]
        self.service_monitor_crd = informers["service_monitor_crd"]
        self.all: tuple[Informer, ...] = tuple(informers.values())
        self._by_scope = {(i.kind, i.namespace or ""): i for i in self.all}

    def lookup(self, kind: str, name: str, namespace: str | None) -> RawObject | None:
        """The cached ``kind`` ``namespace/name`` with its apiVersion and kind, or None (not cached, or absent)."""
        informer = self._by_scope.get((kind, namespace or ""))
        if informer is None:
            return None
        found = informer.get(name, namespace)
        return None if found is None else {"apiVersion": informer.api_version, "kind": kind, **found}


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        *,
        api: Api,
        objects: Objects,
        events: Events,
        nodes: NodeMetadata,
        caches: Caches,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.settings = settings
        self.api = api
        self.objects = objects
        self.events = events
        self.nodes = nodes
        self.caches = caches
        self.clock = clock
        self.applier = applier.Applier(objects, events, field_manager=settings.field_manager)
        self.drainer = drainer.Drainer(api, objects, events, field_manager=settings.field_manager)
        self.gpu_health = gpu_health.GpuHealth(api, objects, nodes, events)
        self.render_settings = workloads.RenderSettings(
            namespace=settings.namespace,
            version=settings.version,
            host_path_prefix=settings.host_path_prefix,
            image_digests=image_refs.decode_digests(settings.image_digests),
        )
        self.status_writes = 0
        self.release = release.running()
        self.crd: crd_sync.CrdState | None = None
        """What the CRD serves, once `crd_sync.ensure` brought it to this release (checked again while not)."""
        self._dra_on: bool | None = None
        """Whether the DRA driver was deployed at the last reconcile (None: none yet)."""

    # -- helpers --------------------------------------------------------------------------------------------

    def _cr_ref(self, cr: RawObject) -> ObjectRef:
        return ObjectRef(CR_API, spec.KIND, spec.OBJECT_NAME, None, (cr.get("metadata") or {}).get("uid"))

    def _lookup(self, kind: str, name: str) -> RawObject | None:
        """An object of the operator's namespace from the cache."""
        return self.caches.lookup(kind, name, self.settings.namespace)

    def _gpu_nodes(self) -> list[str]:
        return sorted(
            str(n["metadata"]["name"])
            for n in self.caches.nodes.items()
            if (n["metadata"].get("labels") or {}).get(workloads.GPU_NODE_LABEL) == "true"
        )

    # -- the reconcile --------------------------------------------------------------------------------------

    def reconcile(self) -> float | None:
        cr = self.objects.get(CR_API, spec.KIND, spec.OBJECT_NAME)
        if cr is None:
            return None
        metadata = cr.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return self._finalize(cr)
        if cleanup.FINALIZER not in (metadata.get("finalizers") or []):
            self._set_finalizers(cr, [*(metadata.get("finalizers") or []), cleanup.FINALIZER])
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
                    self._cr_ref(cr),
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
                    self._cr_ref(cr),
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
        outcome, look = None, None
        index = workloads.driver_daemonset_index(objects)
        if index is not None:
            outcome, look = self._rollout(s, cr, objects[index], now)
            objects[index] = outcome.manifest

        results = states.sync_all(rendered.plan.deploy, objects, self.applier, self.caches.lookup)
        results.extend(cluster_status.blocked(b) for b in rendered.plan.blocked)
        results.extend(cluster_status.disabled(c) for c in rendered.plan.disabled)
        self._prune({(str(o["kind"]), str(o["metadata"]["name"])) for o in objects}, rendered.plan, objects, monitoring)
        self._withdraw_slices_when_dra_is_off(Component.DRA_DRIVER in rendered.plan.deploy)

        if outcome is not None:
            self._apply_rollout(cr, outcome)
            released = {n.name: n.message for n in outcome.status.status.released_nodes}
            self.drainer.apply(outcome.drain, outcome.uncordon, look, now, released)
        vf_nums = self._recreate_for_vf_changes(cr, Component.GPU_DEVICE in rendered.plan.deploy)
        retry = self.gpu_health.apply(self.caches.nodes.items(), s.gpu_device.remediation, now)

        gpu_nodes = self._gpu_nodes()
        rolled = cluster_status.roll_up(
            generation=generation,
            results=results,
            previous=previous,
            now=now,
            rollout=outcome.status if outcome else None,
            ready_nodes=self._ready_nodes(gpu_nodes),
            total_nodes=len(gpu_nodes),
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
                    self._cr_ref(cr),
                    reason=event_reasons.CRD_UPGRADED,
                    message=f"the ClusterOperator CRD now serves release {self.release}'s schema",
                    action="Upgrade",
                )
        return self.crd

    def _withdraw_slices_when_dra_is_off(self, dra_on: bool) -> None:
        """Once per operator start and at each switch to off: the driver's slices go with its DaemonSet (a
        driver stopping cannot tell a restart from its removal, so it keeps them). Reads nothing while on."""
        if not dra_on and self._dra_on is not False:
            self.applier.writes += cleanup.withdraw_slices(self.objects)
        self._dra_on = dra_on

    def _ready_nodes(self, gpu_nodes: list[str]) -> int:
        ready_pods: dict[str, int] = {}
        for pod in self.caches.pods.items():
            if pod["status"].get("ready") and pod["spec"].get("nodeName"):
                node = str(pod["spec"]["nodeName"])
                ready_pods[node] = ready_pods.get(node, 0) + 1
        return sum(1 for n in gpu_nodes if ready_pods.get(n))

    # -- pieces ---------------------------------------------------------------------------------------------

    def _set_finalizers(self, cr: RawObject, finalizers: list[str]) -> None:
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": cr["metadata"]["resourceVersion"]}}
        try:
            self.api.merge_patch(CR_API, spec.KIND, spec.OBJECT_NAME, patch, field_manager=self.settings.field_manager)
        except (Conflict, NotFound) as exc:
            raise MetaxError(f"cluster-operator changed while setting finalizers ({exc}); reconciling again") from exc
        self.applier.writes += 1

    def _finalize(self, cr: RawObject) -> float | None:
        finalizers = list(cr["metadata"].get("finalizers") or [])
        if cleanup.FINALIZER not in finalizers:
            return None
        if not uninstall_wait.over(cr):
            wait = uninstall_wait.await_agents(
                cr,
                node_list=self.caches.nodes.items(),
                pods=self.caches.pods.items(),
                nodes=self.nodes,
                objects=self.objects,
                events=self.events,
                ref=self._cr_ref(cr),
                timeout=self.settings.uninstall_timeout,
                now=self.clock(),
                field_manager=self.settings.field_manager,
            )
            self.applier.writes += wait.writes
            self.status_writes += wait.status_writes
            if not wait.decision.proceed:
                return wait.again_in
            cr = self.objects.get(CR_API, spec.KIND, spec.OBJECT_NAME) or cr  # its status was just written
        log.info("cluster-operator is being deleted: removing everything the operator created")
        self.applier.writes += cleanup.remove_everything(
            self.objects, self.nodes, self.applier, self.settings.namespace, self.caches.nodes.items()
        )
        self.gpu_health.clear(self.caches.nodes.items())
        self.events.emit(
            self._cr_ref(cr),
            reason=event_reasons.CLEANED_UP,
            message="every object and node key the operator wrote is removed",
            action="Delete",
        )
        # Recorded before the object goes: whoever sees cluster-operator gone finds the uninstall's last word.
        if not self.events.flush(EVENTS_BEFORE_GONE):
            log.warning(
                "the uninstall's Events are not all recorded after %.0fs; removing the finalizer anyway",
                EVENTS_BEFORE_GONE,
            )
        self._set_finalizers(cr, [f for f in finalizers if f != cleanup.FINALIZER])
        self.applier.forget()
        return None

    def _prune(
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
        if monitoring and ("ServiceMonitor", workloads.EXPORTER_NAME) not in wanted:
            live = cleanup.service_monitor(self.objects, self.settings.namespace)
            if live is not None:
                why = why_by_component.get(Component.EXPORTER.value, "no exporter Service to scrape")
                self.applier.prune(live, why)
        undeployed = [*plan.disabled, *(b.component for b in plan.blocked)]
        for component in undeployed:
            why = why_by_component.get(component.value, f"component {component.value} is disabled")
            self.applier.prune_absent(rbac.to_remove([component], self.settings.namespace, rendered), why)
            self.applier.prune_absent(workloads.cluster_objects(component), why)

    def _rollout(
        self, s: spec.ClusterOperatorSpec, cr: RawObject, desired: Mapping[str, Any], now: dt.datetime
    ) -> tuple[rollout_driver.Outcome, drainer.Look | None]:
        """The rollout's decision, and what the drain read for it (applied after the objects, `drainer.apply`)."""
        pods = self.caches.pods.items()
        driver_pods = [p for p in pods if rollout_driver.is_driver_pod(p)]
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
            gpu_nodes=self._gpu_nodes() if live_ds is not None else [],
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

    def _apply_rollout(self, cr: RawObject, outcome: rollout_driver.Outcome) -> None:
        ref = self._cr_ref(cr)
        if outcome.ignored_confirmation:  # once per annotation value: the status keeps it (lastConfirmation)
            log.warning("%s", outcome.ignored_confirmation)
            self.events.emit(
                ref,
                reason=event_reasons.CONFIRMATION_IGNORED,
                message=outcome.ignored_confirmation,
                type=EventType.WARNING,
                action="Rollout",
            )
        before = outcome.previous
        after = outcome.status
        if after.upgrading or (before is not None and before.upgrading):
            moved = before is None or (
                before.phase,
                before.status.current_step_index,
                before.status.current_step_state,
            ) != (
                after.phase,
                after.status.current_step_index,
                after.status.current_step_state,
            )
            if moved:
                failed = after.condition(rollout_status.ConditionType.FAILED)
                warning = failed is not None and failed.status is rollout_status.ConditionStatus.TRUE
                log.info("driver rollout: %s", after.message)
                self.events.emit(
                    ref,
                    reason=event_reasons.driver_rollout(after.status.current_step_state.value),
                    message=after.message,
                    type=EventType.WARNING if warning else EventType.NORMAL,
                    action="Rollout",
                )
        deleted = [n for n in outcome.delete_pods if self.objects.delete("v1", "Pod", n, self.settings.namespace)]
        self.applier.writes += len(deleted)  # one loop: every deletion first, then the reports
        which = "previous" if outcome.rollback else "new"
        for name in deleted:
            if name in outcome.agent_restarts:
                message = f"driver pod {name} deleted: its node gets this release's driver-manager and keeps its driver"
            else:
                message = f"driver pod {name} deleted: its node gets the {which} driver"
            log.info("%s", message)
            self.events.emit(
                ObjectRef("v1", "Pod", name, self.settings.namespace),
                reason=event_reasons.DRIVER_POD_DELETED,
                message=message,
                action="Rollout",
            )

    def _recreate_for_vf_changes(self, cr: RawObject, deployed: bool) -> dict[str, int] | None:
        """R-VF: recreate the gpu-device pod of each node whose VF count changed since its pod was seen
        (`vf_restarts.decide`, which ``metax-operator diff --driver-config`` predicts with)."""
        if not deployed:
            return None
        cm = self.caches.configmaps.get(workloads.DRIVER_CONFIG_MAP, self.settings.namespace)
        recorded = {str(k): int(v) for k, v in ((cr.get("status") or {}).get("vfNums") or {}).items()}
        decision = vf_restarts.decide(
            vf_restarts.config_or_none((cm or {}).get("data")),
            recorded,
            vf_restarts.gpu_device_pods(self.caches.pods.items()),
        )
        for change in decision.recreate:
            if self.objects.delete("v1", "Pod", change.pod, self.settings.namespace):
                self.applier.writes += 1
                log.info(
                    "node %s: VF count %d -> %d, gpu-device pod %s recreated",
                    change.node,
                    change.old,
                    change.new,
                    change.pod,
                )
                self.events.emit(
                    ObjectRef("v1", "Node", change.node),
                    reason=event_reasons.VF_COUNT_CHANGED,
                    message=f"VF count {change.old} -> {change.new}: gpu-device pod {change.pod} recreated",
                )
        return dict(decision.seen)

    def _write_status(
        self,
        cr: RawObject,
        rolled: cluster_status.ClusterStatus,
        upgrade: rollout_status.UpgradeStatus | None,
        vf_nums: dict[str, int] | None,
    ) -> bool:
        document: dict[str, Any] = cluster_status.to_document(rolled)
        document["versions"] = {"operator": self.release, "crd": (self.crd.release if self.crd else None) or ""}
        stored: Mapping[str, Any] = cr.get("status") or {}
        if upgrade is not None:
            document["upgradeStatus"] = rollout_status.to_document(upgrade)
        elif "upgradeStatus" in stored:
            document["upgradeStatus"] = stored["upgradeStatus"]
        if vf_nums is not None:
            document["vfNums"] = vf_nums
        elif "vfNums" in stored:
            document["vfNums"] = stored["vfNums"]
        if _canonical(document) == _canonical({k: v for k, v in stored.items() if k in document}) and set(
            stored
        ) <= set(document):
            return False
        body = {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "status": document}
        self.objects.apply_status(body, field_manager=self.settings.field_manager, force=True)
        self.status_writes += 1
        log.info("cluster-operator status: %s", rolled.phase, extra={"object": "ClusterOperator/cluster-operator"})
        return True


def _canonical(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)
