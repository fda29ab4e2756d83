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
import functools
import hashlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    """Everything one decision reads; ``nodes`` in name order, the nodes being drained first.

    A decision must cost little more than one pass over the fleet (P4: at most three times one filtering pass
    over 10,000 nodes, docs/benchmarks.md), so the context reads the fleet's own index by name, makes one pass
    for the nodes on the new revision, and gives the rest on demand: most decisions never look at every node
    on the old revision (`old_in_order` stops at the loop's last node).
    """

    policy: spec.UpgradePolicy
    prev: UpgradeStatus
    first: bool
    nodes: tuple[Node, ...]
    fleet: Fleet
    now: dt.datetime
    plans: tuple[rollout_plan.StepPlan, ...]
    confirmation: str | None = None
    """The value of the confirmation annotation on cluster-operator, if any."""
    drained: frozenset[str] = frozenset()
    """The nodes being drained, first in ``nodes``."""
    by_name: Mapping[str, Node] = attrs.field(
        init=False, default=attrs.Factory(lambda self: self.fleet.by_name, takes_self=True)
    )
    new: tuple[Node, ...] = attrs.field(
        init=False, default=attrs.Factory(lambda self: _new(self.nodes), takes_self=True)
    )
    """The nodes on the new revision, in the order of ``nodes``."""

    @functools.cached_property
    def old(self) -> tuple[Node, ...]:
        """The nodes on the old revision, in the order of ``nodes`` (one more pass, made only when asked)."""
        old = Revision.OLD
        return tuple([n for n in self.nodes if n.revision is old])

    def old_in_order(self) -> Iterator[Node]:
        """The nodes on the old revision one at a time, for a caller that may stop early (`pick`)."""
        old = Revision.OLD
        return (n for n in self.nodes if n.revision is old)

    def place(self, node: Node) -> tuple[bool, str]:
        """Where ``node`` stands in ``nodes``, as a sort key."""
        return node.name not in self.drained, node.name

    def on(self, revision: Revision) -> tuple[Node, ...]:
        """The nodes on ``revision``, in the order of ``nodes``."""
        return self.new if revision is Revision.NEW else self.old

    def names(self, *, revision: Revision, failed: bool | None = None, among: Iterable[str] | None = None) -> list[str]:
        if among is None:
            return [n.name for n in self.on(revision) if failed is None or n.failed is failed]
        pool = [self.by_name[n] for n in sorted(set(among)) if n in self.by_name]
        return [n.name for n in pool if n.revision is revision and (failed is None or n.failed is failed)]


def _new(nodes: Sequence[Node]) -> tuple[Node, ...]:
    # identity against a local: an enum member's class attribute lookup is a Python call per node (P4)
    new = Revision.NEW
    return tuple([n for n in nodes if n.revision is new])


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
    """The first ``want`` (at least 0) idle nodes in name order, and the busy nodes passed over (or all busy ones).

    Taken in batches of as many nodes as are still wanted: a batch cannot hold more idle nodes than that, so
    every busy node in it comes before the last one chosen; a loop may want a thousand nodes (P4).
    """
    nodes = iter(candidates)
    chosen: list[str] = []
    waiting: list[str] = []
    while len(chosen) < want:
        batch = list(itertools.islice(nodes, want - len(chosen)))
        if not batch:
            break
        chosen += [n.name for n in batch if not n.busy]
        waiting += [n.name for n in batch if n.busy]
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
    # The nodes in flight on the new revision and this phase's own in flight on the old one, in the order of
    # ``ctx.nodes``: a pass over the new nodes and a lookup per own node, not a pass over the fleet (P4).
    # `Node.in_flight` is spelt out: a property is a Python call per node.
    flying = [n for n in ctx.new if not n.ready and not n.failed]
    old = Revision.OLD  # an enum member looked up once, not once per node (P4)
    own_old = [
        node
        for name in set(mine)
        if (node := ctx.by_name.get(name)) is not None and node.revision is old and not node.ready and not node.failed
    ]
    if own_old:
        flying = sorted(flying + own_old, key=ctx.place)
    if flying:
        return wait_flying(ctx, d, [n.name for n in flying], label)
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
