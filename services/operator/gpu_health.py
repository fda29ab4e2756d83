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
from metax_core.ports.cluster import Events, NodeMetadata, Objects, RawObject
from metax_core.rollout.status import format_time
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from services.operator import applier, writes

log = logging.getLogger(__name__)

FIELD_MANAGER = "metax-operator-gpu-health"
"""The field manager of the condition (its own, so applying it never touches another field of the Node)."""
PDB_API = "policy/v1"
RETRY_SECONDS = 30.0
"""How soon an eviction a PodDisruptionBudget refused (or the bound deferred) is tried again."""
UNSEEN_WRITE_SECONDS = 30.0
"""How long a condition the operator wrote may stay unseen in its node cache before it is written again."""


class GpuHealth:
    def __init__(self, objects: Objects, nodes: NodeMetadata, events: Events) -> None:
        self.objects = writes.counted(objects)
        self.nodes = nodes
        self.events = events
        self._refused: dict[str, str] = {}
        """Per node, the refusal last told (an Event only when it changes)."""
        self._read: dict[str, tuple[str, report.Report | InvalidSpec]] = {}
        """Per node, the report text last decoded and what it decoded to: a reconcile decodes only what changed."""
        self._written: dict[str, tuple[tuple[object, ...], tuple[object, ...], dt.datetime]] = {}
        """Per node, the condition last written, the cached one it replaced, and when (`_unseen`)."""

    @property
    def condition_writes(self) -> int:
        """Writes of the Node condition so far (set or removed): none while every verdict stays the same."""
        return self.objects.tally.count(writes.STATUS, "Node")

    def apply(self, nodes: Iterable[RawObject], mode: spec.Remediation | None, now: dt.datetime) -> float | None:
        """Conditions and remediation for ``nodes`` (the reconciler hands the cached nodes with a report or a
        condition: a node with neither has nothing to set or remove); the seconds until a refused eviction is
        tried again (None: nothing to retry)."""
        retry = False
        for node in nodes:
            metadata = node.get("metadata") or {}
            name = str(metadata.get("name"))
            text = (metadata.get("annotations") or {}).get(report.ANNOTATION)
            if not text:
                if report.node_condition(node) is not None:  # no agent reports any more: a stale condition says nothing
                    self._remove_condition(name)
                continue
            health = self._decoded(name, text)
            if health is None:
                continue
            self._condition(name, node, health, now)
            if mode is spec.Remediation.EVICT and any(g.holders for g in health.unusable()):
                retry = self._remediate(name, node, health, now) or retry
        return RETRY_SECONDS if retry else None

    def _decoded(self, name: str, text: str) -> report.Report | None:
        """The node's report (None, said once, when it does not read)."""
        seen = self._read.get(name)
        if seen is not None and seen[0] == text:
            return seen[1] if isinstance(seen[1], report.Report) else None
        try:
            found: report.Report | InvalidSpec = report.decode(text)
        except InvalidSpec as exc:
            log.warning("node %s: ignoring its GPU health report: %s", name, exc)
            found = exc
        self._read[name] = (text, found)
        return found if isinstance(found, report.Report) else None

    # -- the condition ------------------------------------------------------------------------------------------

    def _condition(self, name: str, node: RawObject, health: report.Report, now: dt.datetime) -> None:
        have = report.node_condition(node)
        wanted = report.condition_to_apply(health, have, format_time(now))
        if wanted is None:
            self._written.pop(name, None)
            return
        said, before = report.says(wanted), report.says(have)
        if self._unseen(name, said, before, now):
            return
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [wanted]}}
        try:
            self.objects.apply_status(body, field_manager=FIELD_MANAGER, force=True)
        except ClusterError as exc:
            log.warning("node %s: cannot set its %s condition: %s", name, report.CONDITION_TYPE, exc)
            return
        self._written[name] = (said, before, now)
        log.info("node %s: %s=%s (%s)", name, report.CONDITION_TYPE, wanted["status"], wanted["message"])

    def _unseen(self, name: str, said: tuple[object, ...], before: tuple[object, ...], now: dt.datetime) -> bool:
        """Whether the same condition was just written over the same cached one: the node cache has not seen the
        write yet (a reconcile woken by another change of the node ran before the watch delivered it), so writing
        it again would change nothing. For `UNSEEN_WRITE_SECONDS` at most: a write that never shows is repeated."""
        last = self._written.get(name)
        return (
            last is not None and last[:2] == (said, before) and (now - last[2]).total_seconds() < UNSEEN_WRITE_SECONDS
        )

    def clear(self, nodes: Iterable[RawObject]) -> None:
        """Remove the condition from the nodes that have it (the uninstall)."""
        for node in nodes:
            if report.node_condition(node) is not None:
                self._remove_condition(str((node.get("metadata") or {}).get("name")))

    def _remove_condition(self, name: str) -> None:
        """Apply the Node's status without the condition: its field manager's only field goes."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}
        try:
            self.objects.apply_status(body, field_manager=FIELD_MANAGER, force=True)
        except NotFound:
            return
        except ClusterError as exc:
            log.warning("node %s: cannot remove its %s condition: %s", name, report.CONDITION_TYPE, exc)

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
                    self.objects.evict(pod, namespace)
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
        applier.node_event(self.events, node, reason, message, warning=warning, action="Remediate")


def _named(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return (str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
