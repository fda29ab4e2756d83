"""One reconcile's turn of the driver rollout (R-ROLLOUT): from what the operator gathered to what it applies.

Why a module of its own: the operator's shell (`services.operator.rollout_driver`) only gathers and applies
(issue 43 item 5), so every choice between the two lives here, pure and unit-tested: which pods are driver
pods, which stored status to continue from, the fleet snapshot (`metax_core.rollout.fleet`: revisions and the
failure rule), the machine's decision (`metax_core.rollout.machine.decide`), which DaemonSet template to
apply (the desired one, or lastAppliedSpec while rolling back), which driver pods to delete (the machine's
upgrades and rollbacks, else a few for this release's driver-manager, never one already terminating), which
nodes to uncordon, and when to look again. The operator never writes ``spec`` (issue 16): a step that waits
for an administrator is described in the status and confirmed by the ``metax-tech.com/rollout-confirm``
annotation, whose value arrives here as ``confirmation``.

Inputs are the operator's slim dicts (`services.operator.informers.slim_pod` for pods), the clock is ``now``;
what the shell should log arrives in `Outcome.problems`.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.components import Component
from metax_core.errors import InvalidSpec
from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import fleet, machine
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.wire import meta

Manifest = Mapping[str, Any]


def is_driver_pod(pod: Manifest) -> bool:
    """A pod of the driver DaemonSet, by our component label (the operator's pod cache holds every component)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(meta.COMPONENT_LABEL) == Component.DRIVER.value


def stored_status(cr_status: Mapping[str, Any] | None) -> tuple[rollout_status.UpgradeStatus | None, str]:
    """The ``status.upgradeStatus`` to continue from, and why it was dropped when it cannot be read.

    An unreadable status (hand-edited, or written by an operator that is gone) starts the machine from scratch
    rather than stopping the rollout for good: the machine reads the fleet again and goes on from there.
    """
    doc = (cr_status or {}).get("upgradeStatus")
    if not doc:
        return None, ""
    try:
        return rollout_status.from_document(doc), ""
    except InvalidSpec as exc:
        return None, f"stored upgradeStatus is unreadable ({exc}); starting from scratch"


def with_template(manifest: Manifest, template_text: str) -> dict[str, Any]:
    """The driver DaemonSet carrying a stored template (lastAppliedSpec), with this release's driver-manager."""
    result = copy.deepcopy(dict(manifest))
    result["spec"]["template"] = fleet.with_agent(template_text, manifest["spec"]["template"])
    return result


@attrs.frozen
class Outcome:
    """What the operator applies for the rollout this reconcile, in order: the manifest, the deletions, the status."""

    manifest: Manifest
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
    problems: tuple[str, ...] = ()
    """Inputs this turn ignored (an unreadable driver-manager verdict, an unreadable stored status): logged."""


def drive(
    *,
    s: spec.ClusterOperatorSpec,
    desired: Manifest,
    live_ds: Manifest | None,
    driver_pods: Sequence[Manifest],
    gpu_nodes: Sequence[str],
    busy: set[str],
    cr_status: Mapping[str, Any] | None,
    now: dt.datetime,
    ready_timeout: float,
    crash_restarts: int,
    confirmation: str | None = None,
    agent_max_unavailable: int = 1,
    nodes: Sequence[Manifest] = (),
    drain_blockers: Mapping[str, str] | None = None,
) -> Outcome:
    """The rollout's outcome for one reconcile. ``desired``: the rendered driver DaemonSet; ``live_ds``: the one
    on the cluster; ``gpu_nodes``: the GPU nodes (`metax_core.cluster.gpu_nodes.names`); ``busy``: the nodes
    running GPU workloads; ``nodes``: the operator's node cache, where driver-manager's verdicts (fail fast) and
    the rollout's cordon marks (`metax_core.rollout.drain.marked`) are read."""
    verdicts, problems = fleet.node_verdicts(nodes)
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
    previous, unreadable = stored_status(cr_status)
    decision = machine.decide(s.driver.upgrade_policy, previous, snap.fleet, now, confirmation)
    manifest = template_to_apply(decision, new_manifest)
    chosen = set(decision.upgrade) | set(decision.rollback)
    refresh = () if chosen else fleet.agent_restarts(manifest, snap.pods_by_node, agent_max_unavailable)
    return Outcome(
        manifest=manifest,
        delete_pods=pods_to_delete(snap.pods_by_node, chosen | set(refresh)),
        upgrade=decision.upgrade,
        rollback=decision.rollback,
        status=decision.status,
        requeue_after=requeue_after(decision, snap.recheck_at, now),
        waiting=decision.waiting,
        previous=previous,
        ignored_confirmation=decision.ignored_confirmation,
        agent_restarts=tuple(str(snap.pods_by_node[n]["metadata"]["name"]) for n in refresh),
        drain=decision.drain,
        uncordon=rollout_drain.to_uncordon(decision, rollout_drain.marked(nodes)),
        problems=(
            *(f"ignoring driver-manager's verdict: {p}" for p in problems),
            *([unreadable] if unreadable else []),
        ),
    )


def template_to_apply(decision: machine.Decision, new_manifest: Manifest) -> Manifest:
    """The stamped desired DaemonSet, or, while the machine wants the template before the rollout and the status
    keeps it, that template (with this release's driver-manager: a rollback restores the driver, not the agent)."""
    if decision.template is machine.Template.LAST_APPLIED and decision.status.last_applied_spec:
        return with_template(new_manifest, decision.status.last_applied_spec)
    return new_manifest


def pods_to_delete(pods_by_node: Mapping[str, Manifest], nodes: set[str]) -> tuple[str, ...]:
    """The driver pods of ``nodes`` (the one `fleet.pick_pods` chose on each), by name; a pod already terminating
    is left alone: deleting it again changes nothing, and the DaemonSet recreates it on the applied template."""
    return tuple(
        sorted(
            str(pod["metadata"]["name"])
            for node, pod in pods_by_node.items()
            if node in nodes and not pod["metadata"].get("deletionTimestamp")
        )
    )


def requeue_after(decision: machine.Decision, recheck_at: dt.datetime | None, now: dt.datetime) -> dt.timedelta | None:
    """The machine's own requeue, or sooner while a rollout runs: when a pod not Ready yet turns failed."""
    if recheck_at is None or not decision.status.upgrading:
        return decision.requeue_after
    until = max(dt.timedelta(0), recheck_at - now)
    return until if decision.requeue_after is None else min(until, decision.requeue_after)
