"""The batched canary driver upgrade (R-ROLLOUT, 001 §3.2.8) as one pure decision function.

Why it exists: a wrong rollout decision takes GPU nodes offline, so the whole policy lives in one function
with no clock, no I/O and no hidden state: `decide(policy, previous, fleet, now) -> Decision`. The operator
gathers a `Fleet` snapshot, calls `decide` with the status it stored last time, applies the `Decision` (the
DaemonSet template, then the driver-pod deletions, then the status) and calls again after ``requeue_after``
or when something changes. Everything the machine remembers is in the returned status
(`metax_core.rollout.status`), so an operator restart continues exactly where it stopped.

The rules, and every choice made where the seed is silent, are in docs/rollout.md. In short:

- the driver DaemonSet always runs with ``updateStrategy: OnDelete``, so a driver pod is replaced only when
  a decision lists its node in ``upgrade`` (recreated on the new revision) or ``rollback`` (recreated on
  lastAppliedSpec, after the DaemonSet template has been set back); with enableRollout false there is no
  canary, and every idle node is upgraded at once;
- nodes are taken in name order, in loops of maxParallel, a loop only when no node is in flight;
- a node running GPU workloads is never touched; it waits, and ``waiting`` and the messages name it;
- ``pause: true`` means no driver pod is deleted at all, in either direction; in-flight nodes finish;
- one transition per call: a decision whose next step needs no outside change says ``requeue_after=0``.

The inputs and outputs (`Node`, `Fleet`, `Decision`, ...) live in `metax_core.rollout.model` and are
re-exported here, so the operator needs only ``from metax_core import rollout``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import attrs

from metax_core.rollout import draft as rollout_draft
from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout import steps as rollout_steps
from metax_core.rollout.model import Decision, Fleet, Node, Revision, Template
from metax_core.rollout.status import (
    ACTIVE_PHASES,
    CONDITION_ORDER,
    Condition,
    ConditionStatus,
    ConditionType,
    Reason,
    StepState,
    StepStatus,
    UpgradeStatus,
    as_utc,
    in_utc,
)
from metax_core.spec import model as spec

__all__ = ["Decision", "Fleet", "Node", "Revision", "Template", "decide"]


def decide(
    policy: spec.UpgradePolicy,
    previous: UpgradeStatus | None,
    fleet: Fleet,
    now: dt.datetime,
    confirmation: str | None = None,
) -> Decision:
    """The next step of the driver rollout. Pure and total: the same inputs always give the same decision.

    ``confirmation``: the value of the ``metax-tech.com/rollout-confirm`` annotation on cluster-operator; it
    confirms a waiting step only when it equals that step's ``confirmToken``.
    """
    prev = in_utc(previous) if previous is not None else UpgradeStatus()
    drained = rollout_drain.draining(prev)  # offered first: the machine upgrades them as soon as they are idle
    ctx = rollout_draft.Context(
        policy=policy,
        prev=prev,
        first=previous is None,
        nodes=_drained_first(fleet, drained),
        fleet=fleet,
        now=as_utc(now),
        plans=rollout_plan.plan(policy, len(fleet.nodes)),
        confirmation=confirmation or None,
        drained=drained,
    )
    decision = _assemble(ctx, rollout_steps.next_draft(ctx))
    return rollout_drain.apply(policy, prev, ctx.nodes, decision, ctx.now, by_name=ctx.by_name)


def _drained_first(fleet: Fleet, drained: frozenset[str]) -> tuple[Node, ...]:
    """The fleet's nodes in name order, the nodes being drained first (also in name order)."""
    if not drained:
        return fleet.nodes  # already in name order (`Fleet.nodes`): no pass at all
    first = tuple(fleet.by_name[n] for n in sorted(drained) if n in fleet.by_name)
    return first + tuple([n for n in fleet.nodes if n.name not in drained])


def _assemble(ctx: rollout_draft.Context, d: rollout_draft.Draft) -> Decision:
    prev = ctx.prev
    by_name = ctx.by_name
    step_nodes, in_step = _in_fleet(d.step_nodes, by_name)
    conditions = _conditions(ctx, d)
    progressing = next(c for c in conditions if c.type is ConditionType.PROGRESSING)
    waits = d.state is StepState.STEP_PAUSED and progressing.reason in (
        Reason.WAITING_FOR_ADMIN,
        Reason.FALLBACK_PAUSED,
    )
    new = ctx.new
    ignored = _ignored(ctx, prev, waits)
    # counted with list comprehensions over the step's nodes and enum members held in locals: a generator and a
    # class attribute lookup per node would cost more than the rest of the decision (P4)
    on_new, on_old = Revision.NEW, Revision.OLD
    if d.direction is rollout_draft.Direction.FORWARD:
        target = rollout_plan.step_at(ctx.plans, d.index).target
        # started (the step's nodes, this decision's loop included) plus still to start; a started node still on
        # the old revision is not also "to start" (issue 41 item 5: it was counted twice as its loop began)
        started_old = len([n for n in in_step if n.revision is not on_new])
        replicas = len(step_nodes) + max(0, target - len(new) - started_old)
        ready = len([n for n in in_step if n.revision is on_new and n.ready])
    elif d.direction is rollout_draft.Direction.BACKWARD:
        replicas = len(step_nodes)
        ready = len([n for n in in_step if n.revision is on_old and n.ready])
    else:
        replicas = prev.status.current_upgrade_replicas
        ready = prev.status.current_upgrade_ready_replicas
    step = StepStatus(
        last_pod_spec_revision=d.last_revision,
        upgrading_pod_spec_revision=d.upgrading_revision,
        current_step_index=d.index,
        current_upgrade_replicas=replicas,
        current_upgrade_ready_replicas=ready,
        current_failure_retry=d.retry,
        current_step_state=d.state,
        total_upgrade_replicas=len(ctx.nodes),
        total_upgrade_ready_replicas=len([n for n in new if n.ready]),
        last_update_time=prev.status.last_update_time,
        message=d.step_message,
        recheck_time=d.recheck,
        current_step_nodes=step_nodes,
        pending_retry_nodes=_in_fleet(d.pending, by_name)[0],
        waiting_since=d.waiting_since if waits else None,
        confirm_token=d.confirm_token if waits else "",
        last_confirmation=_acted_on(ctx, prev, ignored),
        draining_nodes=prev.status.draining_nodes,  # the drain layer's (`rollout_drain.apply`)
        released_nodes=prev.status.released_nodes,
    )
    if ctx.first or step != prev.status:
        step = attrs.evolve(step, last_update_time=ctx.now)
    status = UpgradeStatus(
        last_applied_spec=d.last_applied_spec,
        last_co_driver_spec=d.last_co_driver_spec,
        upgrading=d.phase in ACTIVE_PHASES,
        conditions=conditions,
        phase=d.phase,
        message=d.message,
        status=step,
    )
    return Decision(
        status=status,
        template=d.template,
        upgrade=tuple(sorted(d.upgrade)),
        rollback=tuple(sorted(d.rollback)),
        ignored_confirmation=ignored,
        waiting=tuple(sorted(d.waiting)),
        requeue_after=d.requeue,
    )


def _in_fleet(names: Sequence[str], by_name: Mapping[str, Node]) -> tuple[tuple[str, ...], Sequence[Node]]:
    """The ``names`` of nodes in the fleet, sorted, each once, and those nodes.

    A loop may hold a thousand nodes (P4): each name is looked up once, and the sort is mostly a check (a step's
    nodes are stored sorted and a loop adds its nodes in name order)."""
    found = [node for name in names if (node := by_name.get(name)) is not None]
    ordered = tuple(dict.fromkeys(sorted([node.name for node in found])))
    if len(ordered) != len(found):  # a name given twice
        found = [by_name[name] for name in ordered]
    return ordered, found


def _ignored(ctx: rollout_draft.Context, prev: UpgradeStatus, waits: bool) -> str:
    """Why a confirmation annotation confirms nothing, when a step waits for one; empty for a value the rollout
    has acted on before (``lastConfirmation``: the administrator's previous, consumed confirmation stays in the
    annotation until the next one overwrites it, issue 41 item 5)."""
    token = prev.status.confirm_token
    if not waits or not ctx.confirmation or not token or ctx.confirmation == token:
        return ""
    if ctx.confirmation == prev.status.last_confirmation:
        return ""
    return (
        f"confirmation {ctx.confirmation!r} ignored: it does not name the waiting step "
        f"(step {prev.status.current_step_index + 1}, token {token}); it is for another step or an older rollout"
    )


def _acted_on(ctx: rollout_draft.Context, prev: UpgradeStatus, ignored: str) -> str:
    """``lastConfirmation``: the annotation's value once it named the waiting step's token (it confirms that
    step, now or once ``pause`` is false) or was reported ignored; otherwise the value stored before."""
    if ctx.confirmation and (ignored or ctx.confirmation == prev.status.confirm_token):
        return ctx.confirmation
    return prev.status.last_confirmation


_INITIAL = {
    ConditionType.PROGRESSING: (ConditionStatus.FALSE, Reason.NO_ROLLOUT, "no driver rollout has run"),
    ConditionType.SUCCEED: (ConditionStatus.UNKNOWN, Reason.NO_ROLLOUT, "no driver rollout has run"),
    ConditionType.FAILED: (ConditionStatus.FALSE, Reason.NO_FAILURE, "no driver rollout has failed"),
    ConditionType.TERMINATING: (ConditionStatus.FALSE, Reason.NOT_TERMINATING, "no rollback is running"),
}


def _conditions(ctx: rollout_draft.Context, d: rollout_draft.Draft) -> tuple[Condition, ...]:
    """All four conditions, always; a condition's lastTransitionTime moves only when its status changes."""
    result = []
    for kind in CONDITION_ORDER:
        old = ctx.prev.condition(kind)
        wanted = d.conditions.get(kind)
        if wanted is None:
            wanted = (old.status, old.reason, old.message) if old is not None else _INITIAL[kind]
        status, reason, message = wanted
        since = old.last_transition_time if old is not None and old.status is status else ctx.now
        result.append(Condition(kind, status, since, reason, message))
    return tuple(result)
