"""Drives the driver rollout (R-ROLLOUT) for real: gather → `rollout.fleet.snapshot` → `machine.decide` → apply.

Why a module of its own: the machine is pure; this is the shell around it. Each reconcile it hands the
informer caches' driver pods, the live and desired DaemonSets and the nodes running GPU workloads
(`metax_core.cluster.gpu_workloads`) to `metax_core.rollout.fleet`, which owns the revision stamping and the
failure rule (crash loop, or not Ready within ``driver_ready_timeout``); calls ``decide`` with the stored
``status.upgradeStatus``, and returns the driver DaemonSet to apply (new template, or lastAppliedSpec when
rolling back), the pods to delete, the status to store and when to look again. The operator
never writes ``spec`` (issue 16): a step that waits for an administrator is described in the status and
confirmed by the ``metax-tech.com/rollout-confirm`` annotation.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.cluster.components import Component
from metax_core.cluster.workloads import COMPONENT_LABEL
from metax_core.errors import InvalidSpec
from metax_core.ports.cluster import RawObject
from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import fleet, machine
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec

log = logging.getLogger(__name__)


def with_template(manifest: Mapping[str, Any], template_text: str) -> dict[str, Any]:
    """The driver DaemonSet carrying a stored template (lastAppliedSpec), with this release's driver-manager."""
    result = copy.deepcopy(dict(manifest))
    result["spec"]["template"] = fleet.with_agent(template_text, manifest["spec"]["template"])
    return result


@attrs.frozen
class Outcome:
    manifest: Mapping[str, Any]
    """The driver DaemonSet to apply."""
    delete_pods: tuple[str, ...]
    upgrade: tuple[str, ...]
    rollback: tuple[str, ...]
    status: rollout_status.UpgradeStatus
    requeue_after: dt.timedelta | None
    waiting: tuple[str, ...]
    previous: rollout_status.UpgradeStatus | None = None
    ignored_confirmation: str = ""
    agent_restarts: tuple[str, ...] = ()
    """Those of ``delete_pods`` deleted for this release's driver-manager only (`fleet.agent_restarts`)."""
    drain: tuple[str, ...] = ()
    """Nodes to hold cordoned and evict the GPU workloads of (`metax_core.rollout.drain`)."""
    uncordon: tuple[str, ...] = ()


def previous_status(cr_status: Mapping[str, Any] | None) -> rollout_status.UpgradeStatus | None:
    doc = (cr_status or {}).get("upgradeStatus")
    if not doc:
        return None
    try:
        return rollout_status.from_document(doc)
    except InvalidSpec as exc:
        log.warning("stored upgradeStatus is unreadable (%s); starting from scratch", exc)
        return None


def drive(
    *,
    s: spec.ClusterOperatorSpec,
    desired: Mapping[str, Any],
    live_ds: RawObject | None,
    driver_pods: Sequence[RawObject],
    gpu_nodes: Sequence[str],
    busy: set[str],
    cr_status: Mapping[str, Any] | None,
    now: dt.datetime,
    ready_timeout: float,
    crash_restarts: int,
    confirmation: str | None = None,
    agent_max_unavailable: int = 1,
    nodes: Sequence[RawObject] = (),
    drain_blockers: Mapping[str, str] | None = None,
) -> Outcome:
    """``nodes``: the operator's node cache, where driver-manager's verdicts (fail fast) and the rollout's cordon
    marks (`metax_k8s.cordon`) are read."""
    verdicts, problems = fleet.node_verdicts(nodes)
    for problem in problems:
        log.warning("ignoring driver-manager's verdict: %s", problem)
    new_manifest = fleet.stamped(desired, s.driver)
    snap = fleet.snapshot(
        new_manifest=new_manifest,
        live_ds=live_ds,
        driver_pods=driver_pods,
        gpu_nodes=gpu_nodes,
        busy=busy,
        now=now,
        ready_timeout=ready_timeout,
        crash_restarts=crash_restarts,
        verdicts=verdicts,
        drain_blockers=drain_blockers,
    )
    previous = previous_status(cr_status)
    decision = machine.decide(s.driver.upgrade_policy, previous, snap.fleet, now, confirmation)
    manifest: Mapping[str, Any]
    if decision.template is machine.Template.LAST_APPLIED and decision.status.last_applied_spec:
        manifest = with_template(new_manifest, decision.status.last_applied_spec)
    else:
        manifest = new_manifest
    chosen = set(decision.upgrade) | set(decision.rollback)
    refresh = () if chosen else fleet.agent_restarts(manifest, snap.pods_by_node, agent_max_unavailable)
    delete = tuple(
        sorted(
            str(p["metadata"]["name"])
            for n, p in snap.pods_by_node.items()
            if (n in chosen or n in refresh) and not p["metadata"].get("deletionTimestamp")
        )
    )
    return Outcome(
        manifest=manifest,
        delete_pods=delete,
        upgrade=decision.upgrade,
        rollback=decision.rollback,
        status=decision.status,
        requeue_after=_requeue_after(decision, snap.recheck_at, now),
        waiting=decision.waiting,
        previous=previous,
        ignored_confirmation=decision.ignored_confirmation,
        agent_restarts=tuple(str(snap.pods_by_node[n]["metadata"]["name"]) for n in refresh),
        drain=decision.drain,
        uncordon=rollout_drain.to_uncordon(decision, rollout_drain.marked(nodes)),
    )


def _requeue_after(decision: machine.Decision, recheck_at: dt.datetime | None, now: dt.datetime) -> dt.timedelta | None:
    """The machine's own requeue, or sooner while a rollout runs: when a pod not Ready yet turns failed."""
    if recheck_at is None or not decision.status.upgrading:
        return decision.requeue_after
    until = max(dt.timedelta(0), recheck_at - now)
    return until if decision.requeue_after is None else min(until, decision.requeue_after)


def is_driver_pod(pod: RawObject) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(COMPONENT_LABEL) == Component.DRIVER.value
