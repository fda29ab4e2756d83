"""Rolling the driver back: the fallback after too many failures, or enableRollout set to false (R-ROLLOUT).

Why a module of its own: `metax_core.rollout.steps` decides a rollout going forward and hands over here when
it must go back; this module sets the template back to lastAppliedSpec, restarts the upgraded nodes on it a loop
at a time, retries nodes the old driver fails on, and ends pinned (Idling, or Disabled when the rollout was
switched off). docs/rollout.md "Rolling back" says the same for administrators.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from metax_core.rollout import draft as rollout_draft
from metax_core.rollout import plan as rollout_plan
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
    CondSpec,
    Context,
    Direction,
    Draft,
    amend,
)
from metax_core.rollout.model import Revision, Template
from metax_core.rollout.status import ConditionType, Phase, Reason, StepState
from metax_core.wording import count, names


def pinned_message(ctx: Context, disabled: bool, rollback_failure: str | None) -> str:
    st = ctx.prev.status
    how = (
        "set enableRollout: true to roll it out again"
        if disabled
        else "to try it again set enableRollout: false and then true"
    )
    message = (
        f"revision {st.upgrading_pod_spec_revision} was rolled back; the driver stays on lastAppliedSpec "
        f"(revision {st.last_pod_spec_revision}): {how}, or change spec.driver"
    )
    return f"{message}; {rollback_failure}" if rollback_failure else message


def failure(ctx: Context) -> str | None:
    failed = ctx.prev.condition(FAILED)
    if failed is not None and failed.status is TRUE and failed.reason is Reason.ROLLBACK_FAILED:
        return failed.message
    return None


def begin(ctx: Context, failure: tuple[Reason, str] | None) -> Draft:
    """Forced (``failure`` None: enableRollout was set to false) or the fallback: set the template back first."""
    new = ctx.names(revision=Revision.NEW)
    st = ctx.prev.status
    canary = failure is not None and failure[0] is Reason.CANARY_FAILED
    if failure is None:
        cause, terminating = "enableRollout was set to false", Reason.ROLLOUT_DISABLED
    elif canary:
        cause, terminating = failure[1], Reason.CANARY_ROLLBACK
    else:
        cause, terminating = f"fallback after: {failure[1]}", Reason.FALLBACK_ROLLBACK
    message = f"rolling {count(len(new), 'node')} back to revision {st.last_pod_spec_revision} ({cause})"
    conds: dict[ConditionType, CondSpec] = {
        TERMINATING: (TRUE, terminating, message),
        PROGRESSING: (FALSE, Reason.ROLLING_BACK, message),
        SUCCEED: (FALSE, Reason.ROLLING_BACK, message),
    }
    if failure is not None:
        conds[FAILED] = (TRUE, failure[0], failure[1])
    d = rollout_draft.carry(ctx, Direction.BACKWARD, Template.LAST_APPLIED)
    return amend(
        d,
        message,
        conds,
        phase=Phase.DISABLING if failure is None else Phase.TERMINATING,
        state=StepState.STEP_UPGRADE_INIT,
        retry=0,
        step_nodes=tuple(new),
        pending=(),
        recheck=None,
        requeue=AT_ONCE,
    )


def run(ctx: Context) -> Draft:
    d = rollout_draft.carry(ctx, Direction.BACKWARD, Template.LAST_APPLIED)
    roll = sorted((set(d.step_nodes) | set(ctx.names(revision=Revision.NEW))) & set(ctx.by_name))
    d = attrs.evolve(d, step_nodes=tuple(roll))
    loop = rollout_plan.loop_size(ctx.policy.max_parallel, len(roll))
    label = f"rollback to revision {d.last_revision}"
    busy = rollout_draft.settle(ctx, d, roll, Revision.OLD, loop, label)
    if busy is not None:
        return busy
    new = ctx.new
    if new:
        if ctx.policy.pause:
            return rollout_draft.held(ctx, d, label, f"{count(len(new), 'node')} still on the new driver")
        chosen, waiting = rollout_draft.pick(new, loop)
        message = f"{label}: {count(len(new), 'node')} still on the new driver"
        if not chosen:
            message += rollout_draft.busy_text(waiting)
            return amend(
                d,
                message,
                {PROGRESSING: (FALSE, Reason.WAITING_FOR_IDLE_NODES, message)},
                waiting=waiting,
                requeue=BUSY_RECHECK,
            )
        message += f"; restarting {names(chosen)} on the old driver" + rollout_draft.busy_text(waiting)
        return amend(
            d,
            message,
            {PROGRESSING: (FALSE, Reason.ROLLING_BACK, message)},
            state=StepState.STEP_UPGRADE,
            rollback=chosen,
            waiting=waiting,
            requeue=IN_FLIGHT_RECHECK,
        )
    failed = ctx.names(revision=Revision.OLD, failed=True, among=roll)
    if failed and d.retry < ctx.policy.max_failure_threshold:
        return rollout_draft.restart(ctx, attrs.evolve(d, retry=d.retry + 1), failed, loop, label)
    return _finish(ctx, d, failed)


def _finish(ctx: Context, d: Draft, failed: Sequence[str]) -> Draft:
    """The rollback is over: Disabled if enableRollout is false (now or when it began), else Idling; pinned."""
    disabled = ctx.prev.phase is Phase.DISABLING or not ctx.policy.enable_rollout
    why = f"the old driver did not come back on {names(failed)}: check these nodes" if failed else None
    message = pinned_message(ctx, disabled, why)
    conds: dict[ConditionType, CondSpec] = {
        TERMINATING: (FALSE, Reason.ROLLBACK_COMPLETE, f"rolled back to revision {d.last_revision}"),
        SUCCEED: (FALSE, Reason.ROLLED_BACK, f"revision {d.upgrading_revision} was rolled back"),
        PROGRESSING: (FALSE, Reason.ROLLOUT_DISABLED if disabled else Reason.ROLLED_BACK, message),
    }
    if why is not None:
        conds[FAILED] = (TRUE, Reason.ROLLBACK_FAILED, why)
    return amend(
        d,
        message,
        conds,
        phase=Phase.DISABLED if disabled else Phase.IDLING,
        state=StepState.COMPLETED,
        pending=(),
        recheck=None,
        requeue=None,
    )
