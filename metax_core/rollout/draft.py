"""The rollout machine's working vocabulary: the decision context, the draft of the next status, and the
moves every transition shares (pick nodes, wait for restarting pods, hold on pause, run a retry loop).

Why a module of its own: `metax_core.rollout.steps` holds the rules (one function per situation) and
`metax_core.rollout.machine` assembles the final decision; both speak in these terms, and keeping them apart keeps
each module readable on its own.

Confirming (the seed: a step without pauseDuration waits until an administrator sets ``pause: false``; this
machine departs from it, issue 16 and docs/rollout.md): a step that reaches a manual pause records reason
WaitingForAdmin, the moment (``waitingSince``) and a confirmation token unique to the rollout revision, the
step and that moment (``confirmToken``). Only an act that names the token confirms it: the annotation
``metax-tech.com/rollout-confirm: <token>`` on cluster-operator (``metax-operator rollout confirm``), given to
`decide` as ``confirmation``. ``pause`` is the administrator's hold on the whole rollout and nothing else, so
no re-apply of the declared spec (Helm, GitOps) can confirm a step; the operator never writes ``spec``. The
fallback "pause" waits for a confirmation the same way (`awaiting`).
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.rollout import plan as rollout_plan
from metax_core.rollout.model import Fleet, Node, Revision, Template
from metax_core.rollout.status import (
    ConditionStatus,
    ConditionType,
    Phase,
    Reason,
    StepState,
    UpgradeStatus,
    format_time,
)
from metax_core.spec import model as spec
from metax_core.wire import meta
from metax_core.wording import count, names

CONFIRM_ANNOTATION = meta.ROLLOUT_CONFIRM
"""The annotation on cluster-operator whose value confirms a waiting step (its ``confirmToken``)."""

IN_FLIGHT_RECHECK = dt.timedelta(seconds=10)
"""Look again this soon while driver pods are restarting (pod events usually come first)."""
BUSY_RECHECK = dt.timedelta(seconds=30)
"""Look again this soon while every node the step needs runs GPU workloads."""
AT_ONCE = dt.timedelta(0)

TRUE, FALSE, UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
PROGRESSING, SUCCEED = ConditionType.PROGRESSING, ConditionType.SUCCEED
FAILED, TERMINATING = ConditionType.FAILED, ConditionType.TERMINATING
CondSpec = tuple[ConditionStatus, Reason, str]


class Direction(enum.Enum):
    """Which way nodes move, so `rollout` knows how to count the current step."""

    FORWARD = "forward"
    BACKWARD = "backward"
    NONE = "none"


@attrs.frozen
class Context:
    """Everything one decision reads; ``nodes`` sorted by name."""

    policy: spec.UpgradePolicy
    prev: UpgradeStatus
    first: bool
    nodes: tuple[Node, ...]
    fleet: Fleet
    now: dt.datetime
    plans: tuple[rollout_plan.StepPlan, ...]
    confirmation: str | None = None
    """The value of the confirmation annotation on cluster-operator, if any."""
    by_name: Mapping[str, Node] = attrs.field(
        init=False, default=attrs.Factory(lambda self: {n.name: n for n in self.nodes}, takes_self=True)
    )
    by_revision: Mapping[Revision, tuple[Node, ...]] = attrs.field(
        init=False, default=attrs.Factory(lambda self: _by_revision(self.nodes), takes_self=True)
    )
    """The nodes on each revision, by name. One pass: a decision reads them several times, and each pass over
    10,000 nodes costs about a millisecond (P4, docs/benchmarks.md)."""

    def names(self, *, revision: Revision, failed: bool | None = None, among: Iterable[str] | None = None) -> list[str]:
        if among is None:
            return [n.name for n in self.by_revision[revision] if failed is None or n.failed is failed]
        pool = [self.by_name[n] for n in sorted(set(among)) if n in self.by_name]
        return [n.name for n in pool if n.revision is revision and (failed is None or n.failed is failed)]


def _by_revision(nodes: Sequence[Node]) -> dict[Revision, tuple[Node, ...]]:
    # identity against locals: an enum member's hash and class attribute lookup are Python calls per node
    return {revision: tuple(n for n in nodes if n.revision is revision) for revision in Revision}


@attrs.frozen
class Draft:
    """The next status and actions, before counters, conditions' times and lastUpdateTime are filled in."""

    phase: Phase
    state: StepState
    direction: Direction
    template: Template
    message: str
    step_message: str
    index: int
    retry: int
    step_nodes: tuple[str, ...]
    pending: tuple[str, ...]
    recheck: dt.datetime | None
    last_applied_spec: str
    last_co_driver_spec: str
    last_revision: str
    upgrading_revision: str
    conditions: Mapping[ConditionType, CondSpec] = attrs.field(factory=dict)
    upgrade: tuple[str, ...] = ()
    rollback: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    waiting_since: dt.datetime | None = None
    confirm_token: str = ""
    requeue: dt.timedelta | None = None


def carry(ctx: Context, direction: Direction, template: Template = Template.NEW) -> Draft:
    """The previous status unchanged, as a starting point."""
    p, st = ctx.prev, ctx.prev.status
    return Draft(
        phase=p.phase,
        state=st.current_step_state,
        direction=direction,
        template=template,
        message=p.message,
        step_message=st.message,
        index=st.current_step_index,
        retry=st.current_failure_retry,
        step_nodes=st.current_step_nodes,
        pending=st.pending_retry_nodes,
        recheck=st.recheck_time,
        last_applied_spec=p.last_applied_spec,
        last_co_driver_spec=p.last_co_driver_spec,
        last_revision=st.last_pod_spec_revision,
        upgrading_revision=st.upgrading_pod_spec_revision,
        waiting_since=st.waiting_since,
        confirm_token=st.confirm_token,
    )


def amend(d: Draft, message: str, conds: Mapping[ConditionType, CondSpec], **changes: Any) -> Draft:
    """``d`` with a new message (top level and step), some conditions replaced and other fields changed."""
    merged = {**d.conditions, **conds}
    return attrs.evolve(d, message=message, step_message=message, conditions=merged, **changes)


def pick(candidates: Iterable[Node], want: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The first ``want`` idle nodes in name order, and the busy nodes passed over (or all busy ones)."""
    chosen: list[str] = []
    waiting: list[str] = []
    for node in candidates:
        if len(chosen) == want:
            break
        (waiting if node.busy else chosen).append(node.name)
    return tuple(chosen), tuple(waiting)


def busy_text(waiting: Sequence[str]) -> str:
    return f"; waiting for GPU workloads to end on {names(waiting)}" if waiting else ""


def wait_flying(ctx: Context, d: Draft, flying: Sequence[str], label: str) -> Draft:
    forward = d.direction is Direction.FORWARD
    message = f"{label}: waiting for {count(len(flying), 'restarting driver pod')} ({names(flying)})"
    reason = Reason.STEP_UPGRADING if forward else Reason.ROLLING_BACK
    if ctx.policy.pause:
        message += "; pause is true, so no further node will start"
        reason = Reason.PAUSED_BY_ADMIN
    return amend(d, message, {PROGRESSING: (TRUE if forward else FALSE, reason, message)}, requeue=IN_FLIGHT_RECHECK)


def held(ctx: Context, d: Draft, label: str, todo: str) -> Draft:
    message = f"{label}: pause is true, so no driver pod is restarted ({todo}); set pause: false to continue"
    status = TRUE if d.direction is Direction.FORWARD else FALSE
    return amend(d, message, {PROGRESSING: (status, Reason.PAUSED_BY_ADMIN, message)}, requeue=None)


def restart(ctx: Context, d: Draft, pending: Sequence[str], loop: int, label: str) -> Draft:
    """The next loop of a retry round: restart up to ``loop`` of the ``pending`` failed nodes."""
    forward = d.direction is Direction.FORWARD
    d = attrs.evolve(d, pending=tuple(pending))
    if ctx.policy.pause:
        return held(ctx, d, label, f"retry of {names(pending)} waits")
    chosen, waiting = pick((ctx.by_name[n] for n in pending), loop)
    status = TRUE if forward else FALSE
    if not chosen:
        message = f"{label}: retry {d.retry} of {ctx.policy.max_failure_threshold}" + busy_text(waiting)
        return amend(
            d,
            message,
            {PROGRESSING: (status, Reason.WAITING_FOR_IDLE_NODES, message)},
            waiting=waiting,
            requeue=BUSY_RECHECK,
        )
    message = (
        f"{label}: retry {d.retry} of {ctx.policy.max_failure_threshold}: restarting the driver on "
        f"{names(chosen)}" + busy_text(waiting)
    )
    started = set(chosen)
    left = tuple(n for n in pending if n not in started)
    actions = {"upgrade": chosen} if forward else {"rollback": chosen}
    return amend(
        d,
        message,
        {PROGRESSING: (status, Reason.STEP_RETRYING, message)},
        state=StepState.STEP_UPGRADE,
        pending=left,
        waiting=waiting,
        requeue=IN_FLIGHT_RECHECK,
        **actions,
    )


def settle(
    ctx: Context, d: Draft, mine: Sequence[str], retry_revision: Revision, loop: int, label: str
) -> Draft | None:
    """First let in-flight nodes land, then re-run this phase's pending retries (on ``retry_revision``).

    None when nothing is in flight or pending, so the caller goes on to judge the phase.
    """
    own = set(mine)
    new = Revision.NEW  # an enum member looked up once, not once per node (P4)
    flying = [n.name for n in ctx.nodes if n.in_flight and (n.revision is new or n.name in own)]
    if flying:
        return wait_flying(ctx, d, flying, label)
    pending = ctx.names(revision=retry_revision, failed=True, among=d.pending)
    if pending:
        return restart(ctx, d, pending, loop, label)
    return None


def make_token(revision: str, index: int, since: dt.datetime) -> str:
    """The confirmation token of step ``index`` (0-based) of the rollout to ``revision``, waiting since ``since``."""
    digest = hashlib.sha256(f"{revision}\x00{index}\x00{format_time(since)}".encode()).hexdigest()[:8]
    return f"{revision[:16] or 'rollout'}-step{index + 1}-{digest}"


def awaiting(ctx: Context, d: Draft, reached_now: bool) -> tuple[bool, Draft]:
    """Whether the administrator has confirmed this wait, and ``d`` with the wait recorded.

    Reaching the wait records ``waitingSince`` and a fresh token (nothing can confirm it in the same
    decision). Later, the wait is confirmed when the confirmation given to `decide` equals the token and
    ``pause`` is false (``pause: true`` holds even a confirmed step; releasing the hold confirms nothing).
    A status from an operator before issue 16 (no token) gets one now.
    """
    if reached_now or not d.confirm_token:
        token = make_token(d.upgrading_revision, d.index, ctx.now)
        return False, attrs.evolve(d, waiting_since=ctx.now, confirm_token=token, requeue=None)
    confirmed = ctx.confirmation == d.confirm_token and not ctx.policy.pause
    return confirmed, attrs.evolve(d, requeue=None)
