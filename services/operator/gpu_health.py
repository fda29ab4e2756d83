"""The operator's part of GPU health: the Node condition and the remediation (R-HEALTH, docs/health.md).

The node's allocator agent publishes its GPUs' verdicts in its report annotation (`metax_core.health.report`).
From the node cache, every reconcile sets the Node condition ``MetaXGPUHealthy`` the report says (server-side
apply on ``nodes/status``, so the kubelet's conditions are untouched; only when it differs from the cached one:
quiet in steady state) and, with ``gpuDevice.remediation: evict``, evicts the pods holding an unusable GPU
(`metax_core.cluster.gpu_remediation`: confirmed on the node, bounded per node and hour, Eviction API) with an
Event on the Node for each eviction round and each refusal, and remembers what it began on the Node.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from metax_core.cluster import eviction
from metax_core.cluster import gpu_remediation as remediation
from metax_core.errors import ClusterError, InvalidSpec, NotFound
from metax_core.health import report
from metax_core.ports.cluster import Events, EventType, NodeMetadata, ObjectRef, Objects, RawObject
from metax_core.rollout.status import format_time
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from metax_k8s.api import Api

log = logging.getLogger(__name__)

FIELD_MANAGER = "metax-operator-gpu-health"
"""The field manager of the condition (its own, so applying it never touches another field of the Node)."""
PDB_API = "policy/v1"
RETRY_SECONDS = 30.0
"""How soon an eviction a PodDisruptionBudget refused (or the bound deferred) is tried again."""


def cached_condition(node: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """(status, reason, message, lastTransitionTime) of the Node's ``MetaXGPUHealthy``, as the cache keeps it."""
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == report.CONDITION_TYPE:
            return (c.get("status", ""), c.get("reason", ""), c.get("message", ""), c.get("lastTransitionTime", ""))
    return None


class GpuHealth:
    def __init__(self, api: Api, objects: Objects, nodes: NodeMetadata, events: Events) -> None:
        self.api = api
        self.objects = objects
        self.nodes = nodes
        self.events = events
        self.condition_writes = 0
        self._refused: dict[str, str] = {}
        """Per node, the refusal last told (an Event only when it changes)."""
        self._unreadable: dict[str, str] = {}

    def apply(self, nodes: Iterable[RawObject], mode: spec.Remediation | None, now: dt.datetime) -> float | None:
        """Conditions and remediation for every cached node; the seconds until a refused eviction is tried
        again (None: nothing to retry)."""
        retry = False
        for node in nodes:
            metadata = node.get("metadata") or {}
            name = str(metadata.get("name"))
            text = (metadata.get("annotations") or {}).get(report.ANNOTATION)
            if not text:
                if cached_condition(node) is not None:  # no agent reports any more: a stale condition says nothing
                    self._remove_condition(name)
                continue
            try:
                health = report.decode(text)
            except InvalidSpec as exc:
                if self._unreadable.get(name) != str(exc):
                    log.warning("node %s: ignoring its GPU health report: %s", name, exc)
                self._unreadable[name] = str(exc)
                continue
            self._unreadable.pop(name, None)
            self._condition(name, node, health, now)
            if mode is spec.Remediation.EVICT and health.unusable():
                retry = self._remediate(name, node, health, now) or retry
        return RETRY_SECONDS if retry else None

    # -- the condition ------------------------------------------------------------------------------------------

    def _condition(self, name: str, node: RawObject, health: report.Report, now: dt.datetime) -> None:
        wanted = report.condition(health)
        have = cached_condition(node)
        if have is not None and have[:3] == (wanted.status, wanted.reason, wanted.message):
            return
        since = have[3] if have is not None and have[0] == wanted.status and have[3] else format_time(now)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {
                "conditions": [
                    {
                        "type": report.CONDITION_TYPE,
                        "status": wanted.status,
                        "reason": wanted.reason,
                        "message": wanted.message,
                        "lastTransitionTime": since,
                        "lastHeartbeatTime": format_time(now),
                    }
                ]
            },
        }
        try:
            self.api.apply(body, field_manager=FIELD_MANAGER, force=True, subresource="status")
        except ClusterError as exc:
            log.warning("node %s: cannot set its %s condition: %s", name, report.CONDITION_TYPE, exc)
            return
        self.condition_writes += 1
        log.info("node %s: %s=%s (%s)", name, report.CONDITION_TYPE, wanted.status, wanted.message)

    def clear(self, nodes: Iterable[RawObject]) -> None:
        """Remove the condition from the nodes that have it (the uninstall)."""
        for node in nodes:
            if cached_condition(node) is not None:
                self._remove_condition(str((node.get("metadata") or {}).get("name")))

    def _remove_condition(self, name: str) -> None:
        """Apply the Node's status without the condition: its field manager's only field goes."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}
        try:
            self.api.apply(body, field_manager=FIELD_MANAGER, force=True, subresource="status")
        except NotFound:
            return
        except ClusterError as exc:
            log.warning("node %s: cannot remove its %s condition: %s", name, report.CONDITION_TYPE, exc)
            return
        self.condition_writes += 1

    # -- remediation --------------------------------------------------------------------------------------------

    def _remediate(self, name: str, node: RawObject, health: report.Report, now: dt.datetime) -> bool:
        """Evict what the plan says; True when something was refused or deferred (to be tried again)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        try:
            history = remediation.decode_history(annotations.get(remediation.HISTORY_ANNOTATION))
        except InvalidSpec as exc:
            log.warning("node %s: starting its remediation history afresh: %s", name, exc)
            history = ()
        pods = self.objects.list("v1", "Pod", field_selector=f"spec.nodeName={name}").items
        made = remediation.plan(health, history, now, remediation.holders_here(name, pods))
        if made.history != history:
            try:
                encoded = remediation.encode_history(made.history) if made.history else None
                self.nodes.patch_node_metadata(name, annotations={remediation.HISTORY_ANNOTATION: encoded})
            except ClusterError as exc:  # not remembered: evict nothing rather than exceed the bound later
                log.warning("node %s: cannot record the remediation, not evicting: %s", name, exc)
                return True
        refused: list[str] = [f"{gpu.address}: {why}" for gpu, why in made.deferred]
        budgets: list[RawObject] | None = None
        for remedy in made.evict:
            evicted: list[str] = []
            for namespace, pod in remedy.pods:
                try:
                    self.api.evict(pod, namespace)
                    evicted.append(f"{namespace}/{pod}")
                except NotFound:
                    continue
                except ClusterError as exc:
                    if exc.status != 429:
                        refused.append(f"{namespace}/{pod}: {exc}")
                        continue
                    if budgets is None:
                        budgets = list(self.objects.list(PDB_API, "PodDisruptionBudget").items)
                    which = next((p for p in pods if _named(p) == (namespace, pod)), {})
                    names = eviction.blocking_budgets(which, budgets) or ["a PodDisruptionBudget"]
                    refused.append(f"{namespace}/{pod}: {', '.join(names)} allows no disruption now")
            if evicted:
                self._event(
                    name,
                    event_reasons.GPU_REMEDIATION_EVICTED,
                    f"GPU {remedy.gpu.describe()}: evicted {', '.join(evicted)}",
                    warning=False,
                )
        told = "; ".join(refused)
        if told and self._refused.get(name) != told:
            self._event(name, event_reasons.GPU_REMEDIATION_BLOCKED, f"not evicted: {told}; tried again", warning=True)
        self._refused[name] = told
        return bool(told)

    def _event(self, node: str, reason: str, message: str, *, warning: bool) -> None:
        log.info("node %s: %s", node, message)
        self.events.emit(
            ObjectRef("v1", "Node", node),
            reason=reason,
            message=message,
            type=EventType.WARNING if warning else EventType.NORMAL,
            action="Remediate",
        )


def _named(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return (str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
