"""The rollout machine's rules: one function per situation, each drafting the next status and actions.

Why a module of its own: `metax_core.rollout.machine.decide` is the entry point and turns a `Draft` into counters,
conditions and times; this module decides which step runs, which nodes restart, when a step pauses,
resumes, retries or falls back; rolling back is `metax_core.rollout.rollback`. docs/rollout.md describes the
same situations for administrators, in the same order: no rollout, a step going forward, pauses, failures,
rolling back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import attrs

from metax_core.rollout import confirm as rollout_confirm
from metax_core.rollout import draft as rollout_draft
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout import rollback as rollout_rollback
from metax_core.rollout.draft import (
    AT_ONCE,
    BUSY_RECHECK,
    FAILED,
    FALSE,
    IN_FLIGHT_RECHECK,
    PROGRESSING,
    SUCCEED,
    TERMINATING,
    TRUE,
    UNKNOWN,
    CondSpec,
    Context,
    Direction,
    Draft,
    amend,
)
from metax_core.rollout.model import Revision, Template
from metax_core.rollout.status import (
    ConditionType,
    Phase,
    Reason,
    StepState,
    as_utc,
    format_time,
)
from metax_core.spec import model as spec
from metax_core.wording import count, names


def next_draft(ctx: Context) -> Draft:
    phase = ctx.prev.phase
    if phase in (Phase.TERMINATING, Phase.DISABLING):
        return rollout_rollback.run(ctx)
    if phase is Phase.PROGRESSING:
        if not ctx.policy.enable_rollout:
            return rollout_rollback.begin(ctx, None)
        if ctx.prev.status.upgrading_pod_spec_revision != ctx.fleet.new_revision:
            return _start(ctx, retarget=True)
        if ctx.prev.status.current_step_state is StepState.STEP_PAUSED:
            return _paused(ctx)
        return _step(ctx)
    return _idle(ctx)


# --- no rollout running --------------------------------------------------------------------------------------


def _idle(ctx: Context) -> Draft:
    prev = ctx.prev
    succeed = prev.condition(SUCCEED)
    pinned = (
        not ctx.first
        and succeed is not None
        and succeed.reason is Reason.ROLLED_BACK
        and prev.status.upgrading_pod_spec_revision == ctx.fleet.new_revision
    )
    d = rollout_draft.carry(ctx, Direction.NONE)
    if not ctx.policy.enable_rollout:
        if not pinned:
            return _all_at_once(ctx, d)
        message = rollout_rollback.pinned_message(ctx, True, rollout_rollback.failure(ctx))
        return amend(
            d,
            message,
            {PROGRESSING: (FALSE, Reason.ROLLOUT_DISABLED, message)},
            phase=Phase.DISABLED,
            template=Template.LAST_APPLIED,
        )
    if pinned and prev.phase is not Phase.DISABLED:
        message = rollout_rollback.pinned_message(ctx, False, rollout_rollback.failure(ctx))
        return amend(
            d,
            message,
            {PROGRESSING: (FALSE, Reason.ROLLED_BACK, message)},
            phase=Phase.IDLING,
            template=Template.LAST_APPLIED,
        )
    if len(ctx.new) < len(ctx.nodes):  # some node is on the old revision
        return _start(ctx, retarget=False)
    message = f"no driver rollout is running: every node runs revision {ctx.fleet.new_revision}"
    if not ctx.first and prev.phase is Phase.IDLING and prev.message:
        message = prev.message  # keep what the last rollout's end said (e.g. nodes failed within maxUnavailable)
    old = prev.condition(PROGRESSING)
    keep = old is not None and old.status is FALSE and old.reason in (Reason.ROLLOUT_COMPLETED, Reason.NO_ROLLOUT)
    conds = {} if keep else {PROGRESSING: (FALSE, Reason.NO_ROLLOUT, "no driver rollout is running")}
    return amend(d, message, conds, phase=Phase.IDLING)


def _all_at_once(ctx: Context, d: Draft) -> Draft:
    """enableRollout is false: no canary; every idle node still on the old driver is upgraded now."""
    d = attrs.evolve(d, phase=Phase.DISABLED)
    old = [n for n in ctx.old if not n.in_flight]
    label = "enableRollout is false"
    if not old:
        message = f"{label}: no canary steps; every node runs revision {ctx.fleet.new_revision}"
        return amend(d, message, {PROGRESSING: (FALSE, Reason.ROLLOUT_DISABLED, message)})
    if ctx.policy.pause:
        return rollout_draft.held(ctx, d, label, f"{count(len(old), 'node')} still on the old driver")
    chosen, waiting = rollout_draft.pick(old, len(old))
    message = (
        f"{label}: upgrading every idle node at once, without canary steps ({names(chosen) or 'none'})"
        + rollout_draft.busy_text(waiting)
    )
    return amend(
        d,
        message,
        {PROGRESSING: (FALSE, Reason.ROLLOUT_DISABLED, message)},
        upgrade=chosen,
        waiting=waiting,
        requeue=BUSY_RECHECK if waiting else IN_FLIGHT_RECHECK,
    )


def _start(ctx: Context, *, retarget: bool) -> Draft:
    fleet, first = ctx.fleet, ctx.plans[0]
    plan_text = (
        f"rolling out revision {fleet.new_revision} to {count(len(ctx.nodes), 'node')} in "
        f"{count(len(ctx.plans), 'step')}; step 1 of {len(ctx.plans)}: {count(first.target, 'node')} "
        f"on the new driver, {first.loop} at a time"
    )
    if retarget:
        st = ctx.prev.status
        message = (
            f"the desired driver revision changed from {st.upgrading_pod_spec_revision} to "
            f"{fleet.new_revision} during the rollout: starting again from step 1; " + plan_text
        )
        d = rollout_draft.carry(ctx, Direction.FORWARD)
        reason = Reason.TARGET_CHANGED
    else:
        message = plan_text
        d = attrs.evolve(
            rollout_draft.carry(ctx, Direction.FORWARD),
            last_applied_spec=fleet.old_spec,
            last_co_driver_spec=fleet.old_driver_spec,
            last_revision=fleet.old_revision,
        )
        reason = Reason.ROLLOUT_STARTED
    conds = {
        PROGRESSING: (TRUE, reason, message),
        SUCCEED: (UNKNOWN, Reason.ROLLOUT_IN_PROGRESS, "the driver rollout is running"),
        FAILED: (FALSE, Reason.NO_FAILURE, "no step has failed"),
        TERMINATING: (FALSE, Reason.NOT_TERMINATING, "no rollback is running"),
    }
    return amend(
        d,
        message,
        conds,
        phase=Phase.PROGRESSING,
        state=StepState.STEP_UPGRADE_INIT,
        index=0,
        retry=0,
        step_nodes=(),
        pending=(),
        recheck=None,
        upgrading_revision=fleet.new_revision,
        requeue=AT_ONCE,
    )


# --- a step going forward --------------------------------------------------------------------------------------


def _label(ctx: Context, plan: rollout_plan.StepPlan) -> str:
    return f"step {plan.index + 1} of {len(ctx.plans)} ({plan.target} of {len(ctx.nodes)} nodes)"


def _step(ctx: Context) -> Draft:
    plan = rollout_plan.step_at(ctx.plans, ctx.prev.status.current_step_index)
    d = attrs.evolve(rollout_draft.carry(ctx, Direction.FORWARD), index=plan.index)
    label = _label(ctx, plan)
    step_nodes = [n for n in d.step_nodes if n in ctx.by_name]
    busy = rollout_draft.settle(ctx, d, step_nodes, Revision.NEW, plan.loop, label)
    if busy is not None:
        return busy
    failed = ctx.names(revision=Revision.NEW, failed=True, among=step_nodes)
    if failed and plan.index == 0 and ctx.policy.on_canary_failure is spec.OnCanaryFailure.ROLLBACK:
        why = f"{label}: the canary failed on {names(failed)} (onCanaryFailure: rollback, no retries)"
        return rollout_rollback.begin(ctx, (Reason.CANARY_FAILED, why))
    if len(failed) > plan.toleration:
        why = (
            f"{label}: {count(len(failed), 'failed node')} ({names(failed)}), "
            f"more than its toleration of {plan.toleration}"
        )
        return _failure(ctx, d, plan, failed, Reason.STEP_FAILED, why)
    upgraded = len(ctx.new)
    if upgraded < plan.target:
        return _next_loop(ctx, d, plan, upgraded, label)
    if plan.index == len(ctx.plans) - 1:
        failed = ctx.names(revision=Revision.NEW, failed=True)
        allowed = rollout_plan.max_unavailable(ctx.policy, len(ctx.nodes))
        if len(failed) > allowed:
            why = (
                f"{count(len(failed), 'node')} failed the upgrade ({names(failed)}), "
                f"more than maxUnavailable allows ({allowed})"
            )
            return _failure(ctx, d, plan, failed, Reason.TOO_MANY_UNAVAILABLE, why)
    if ctx.prev.status.current_step_state is StepState.STEP_READY:
        if ctx.policy.pause:
            return rollout_draft.held(ctx, d, label, "the next step waits")
        return _advance(ctx, d, plan)
    return _step_done(ctx, d, plan, label)


def _next_loop(ctx: Context, d: Draft, plan: rollout_plan.StepPlan, upgraded: int, label: str) -> Draft:
    todo = plan.target - upgraded
    if ctx.policy.pause:
        return rollout_draft.held(ctx, d, label, f"{count(todo, 'node')} still to upgrade")
    chosen, waiting = rollout_draft.pick(ctx.old_in_order(), min(plan.loop, todo))
    if not chosen:
        message = f"{label}: {count(todo, 'node')} still to upgrade" + rollout_draft.busy_text(waiting)
        return amend(
            d,
            message,
            {PROGRESSING: (TRUE, Reason.WAITING_FOR_IDLE_NODES, message)},
            waiting=waiting,
            requeue=BUSY_RECHECK,
        )
    message = f"{label}: upgrading {names(chosen)}" + rollout_draft.busy_text(waiting)
    return amend(
        d,
        message,
        {PROGRESSING: (TRUE, Reason.STEP_UPGRADING, message)},
        state=StepState.STEP_UPGRADE,
        step_nodes=d.step_nodes + chosen,
        upgrade=chosen,
        waiting=waiting,
        requeue=IN_FLIGHT_RECHECK,
    )


def _failure(
    ctx: Context, d: Draft, plan: rollout_plan.StepPlan, failed: Sequence[str], reason: Reason, why: str
) -> Draft:
    """Too many failures: another retry round if maxFailureThreshold allows, else the fallback."""
    threshold = ctx.policy.max_failure_threshold
    if d.retry < threshold:
        return rollout_draft.restart(ctx, attrs.evolve(d, retry=d.retry + 1), failed, plan.loop, _label(ctx, plan))
    why = f"{why}; {count(threshold, 'retry', 'retries')} used, fallback: {ctx.policy.fallback.value}"
    if ctx.policy.fallback is spec.Fallback.ROLLBACK:
        return rollout_rollback.begin(ctx, (reason, why))
    return _paused_by_fallback(ctx, d, why, (TRUE, reason, why))


def _paused_by_fallback(ctx: Context, d: Draft, why: str, failed: CondSpec | None) -> Draft:
    _, d = rollout_draft.awaiting(ctx, d, reached_now=failed is not None)
    message = (
        f"the rollout is paused after a failure ({why}): confirm to retry the failed nodes, "
        "or set enableRollout: false to roll back; " + rollout_confirm.hint(d.index + 1, d.confirm_token)
    )
    conds: dict[ConditionType, CondSpec] = {PROGRESSING: (FALSE, Reason.FALLBACK_PAUSED, message)}
    if failed is not None:
        conds[FAILED] = failed
    return amend(d, message, conds, state=StepState.STEP_PAUSED, recheck=None)


def _step_done(ctx: Context, d: Draft, plan: rollout_plan.StepPlan, label: str) -> Draft:
    done = f"{label} done"
    if plan.pause is rollout_plan.PauseKind.NONE:
        message = f"{done}; this step does not pause"
        return amend(
            d,
            message,
            {PROGRESSING: (TRUE, Reason.STEP_READY, message)},
            state=StepState.STEP_READY,
            recheck=None,
            requeue=AT_ONCE,
        )
    if plan.pause is rollout_plan.PauseKind.TIMED:
        recheck = ctx.now + dt.timedelta(milliseconds=max(0, plan.step.pause_duration or 0))
        message = f"{done}; pausing until {format_time(recheck)}, then going on unless pause is true"
        return amend(
            d,
            message,
            {PROGRESSING: (TRUE, Reason.WAITING_FOR_PAUSE_DURATION, message)},
            state=StepState.STEP_PAUSED,
            recheck=recheck,
            requeue=recheck - ctx.now,
        )
    return _manual(ctx, attrs.evolve(d, state=StepState.STEP_PAUSED, recheck=None), done, reached_now=True)


def _manual(ctx: Context, d: Draft, done: str, *, reached_now: bool) -> Draft:
    _, d = rollout_draft.awaiting(ctx, d, reached_now)
    message = f"{done}; waiting for an administrator to confirm this step; " + rollout_confirm.hint(
        d.index + 1, d.confirm_token
    )
    if ctx.policy.pause:
        message += "; pause is true: the rollout stays held until it is false"
    return amend(d, message, {PROGRESSING: (TRUE, Reason.WAITING_FOR_ADMIN, message)})


def _paused(ctx: Context) -> Draft:
    prev, st = ctx.prev, ctx.prev.status
    plan = rollout_plan.step_at(ctx.plans, st.current_step_index)
    d = attrs.evolve(rollout_draft.carry(ctx, Direction.FORWARD), index=plan.index)
    label = _label(ctx, plan)
    failed = prev.condition(FAILED)
    if failed is not None and failed.status is TRUE:
        confirmed, waited = rollout_draft.awaiting(ctx, d, reached_now=False)
        if confirmed:
            return _resume_after_failure(ctx, waited, plan, failed.reason, failed.message)
        return _paused_by_fallback(ctx, d, failed.message, None)
    ready = {PROGRESSING: (TRUE, Reason.STEP_READY, f"{label} done; its pause is over")}
    if st.recheck_time is not None:
        recheck = as_utc(st.recheck_time)
        if ctx.now < recheck:
            reason = Reason.PAUSED_BY_ADMIN if ctx.policy.pause else Reason.WAITING_FOR_PAUSE_DURATION
            message = f"{label} done; pausing until {format_time(recheck)}"
            return amend(d, message, {PROGRESSING: (TRUE, reason, message)}, requeue=recheck - ctx.now)
        if ctx.policy.pause:
            message = f"{label} done and its pause is over, but pause is true: set pause: false to go on"
            return amend(d, message, {PROGRESSING: (TRUE, Reason.PAUSED_BY_ADMIN, message)}, requeue=None)
        return amend(d, ready[PROGRESSING][2], ready, state=StepState.STEP_READY, recheck=None, requeue=AT_ONCE)
    confirmed, waited = rollout_draft.awaiting(ctx, d, reached_now=False)
    if confirmed:
        return amend(
            waited,
            f"{label} done; confirmed by an administrator",
            ready,
            state=StepState.STEP_READY,
            requeue=AT_ONCE,
        )
    return _manual(ctx, d, f"{label} done", reached_now=False)


def _resume_after_failure(ctx: Context, d: Draft, plan: rollout_plan.StepPlan, reason: Reason, why: str) -> Draft:
    """An administrator resumed a rollout the fallback paused: one fresh retry round, counter back to 0."""
    among = None if reason is Reason.TOO_MANY_UNAVAILABLE else d.step_nodes
    failed = ctx.names(revision=Revision.NEW, failed=True, among=among)
    resumed = (FALSE, Reason.RESUMED_AFTER_FAILURE, f"resumed by an administrator after: {why}")
    d = amend(d, d.message, {FAILED: resumed}, state=StepState.STEP_UPGRADE, retry=0, recheck=None)
    if failed:
        return rollout_draft.restart(ctx, d, failed, plan.loop, _label(ctx, plan))
    message = f"{_label(ctx, plan)}: resumed by an administrator; the failed nodes have recovered"
    return amend(d, message, {PROGRESSING: (TRUE, Reason.STEP_UPGRADING, message)}, requeue=AT_ONCE)


def _advance(ctx: Context, d: Draft, plan: rollout_plan.StepPlan) -> Draft:
    if plan.index >= len(ctx.plans) - 1:
        return _complete(ctx, d)
    nxt = ctx.plans[plan.index + 1]
    message = (
        f"step {nxt.index + 1} of {len(ctx.plans)} begins: {nxt.target} of {len(ctx.nodes)} nodes on the "
        f"new driver when done ({nxt.size} more, {nxt.loop} at a time, {nxt.toleration} may fail)"
    )
    return amend(
        d,
        message,
        {PROGRESSING: (TRUE, Reason.STEP_UPGRADING, message)},
        index=nxt.index,
        state=StepState.STEP_UPGRADE_INIT,
        retry=0,
        step_nodes=(),
        pending=(),
        recheck=None,
        requeue=AT_ONCE,
    )


def _complete(ctx: Context, d: Draft) -> Draft:
    failed = ctx.names(revision=Revision.NEW, failed=True)
    message = f"the driver rollout is complete: every node runs revision {d.upgrading_revision}"
    if failed:
        message += f" (failed within maxUnavailable: {names(failed)})"
    conds = {
        PROGRESSING: (FALSE, Reason.ROLLOUT_COMPLETED, message),
        SUCCEED: (TRUE, Reason.ROLLOUT_COMPLETED, message),
        FAILED: (FALSE, Reason.NO_FAILURE, "no step has failed"),
        TERMINATING: (FALSE, Reason.NOT_TERMINATING, "no rollback is running"),
    }
    return amend(d, message, conds, phase=Phase.IDLING, state=StepState.COMPLETED, pending=(), recheck=None)
