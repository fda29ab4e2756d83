"""A whole driver rollout played through `rollout.decide` on a simulated fleet, with a simulated clock.

Why it exists: ``metax-operator rollout plan`` shows an administrator what a policy will do before it runs,
the benchmark times whole rollouts, and the tests check properties over whole runs. All three need the same
honest driver of the real machine: it applies each decision the way the operator would (a deleted driver
pod is in flight for one decision, then ready, or failed on the nodes told to fail), plays the administrator
who confirms every step that waits (with its ``confirmToken``, as ``metax-operator rollout confirm`` does),
and advances the clock by ``requeue_after``. Pure: the start time is an argument.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import attrs

from metax_core.rollout import machine as rollout
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout.status import (
    ConditionStatus,
    ConditionType,
    Phase,
    Reason,
    StepState,
    UpgradeStatus,
)
from metax_core.spec import model as spec

EPOCH = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
OLD_REVISION = "old"
NEW_REVISION = "new"


class Outcome(enum.Enum):
    COMPLETED = "Completed"
    """Every node runs the new driver (failures, if any, within maxUnavailable)."""
    PAUSED = "Paused"
    """The fallback paused the rollout; an administrator must resume it or roll back."""
    ROLLED_BACK = "RolledBack"
    """The fallback rolled every upgraded node back to the old driver."""
    FAILED = "Failed"
    """The rollback itself left failed nodes, or the rollout did not finish within the decision budget."""


@attrs.frozen
class SimStep:
    index: int
    replicas: int
    """Nodes on the new driver when the step is done."""
    batches: tuple[tuple[str, ...], ...]
    """The loops that upgraded nodes for the first time, in order."""
    retries: tuple[tuple[str, ...], ...]
    """Loops that restarted failed nodes again."""
    pause: str | None
    """"manual", "<N>ms" or None (see `rollout_plan.pause_label`)."""


@attrs.frozen
class Simulation:
    steps: tuple[SimStep, ...]
    outcome: Outcome
    rollback: tuple[tuple[str, ...], ...]
    """The loops of the rollback, if the fallback (or a retry of it) ran one."""
    decisions: int
    duration: dt.timedelta
    """Simulated time from the first decision to the end (pauses included)."""
    final: UpgradeStatus
    nodes: tuple[rollout.Node, ...]
    """The fleet at the end, by name."""


Observer = Callable[[rollout.Decision, rollout.Fleet, spec.UpgradePolicy], None]


def node_names(count: int) -> tuple[str, ...]:
    """node-01 … node-N, zero-padded (at least two digits) so that name order is numeric order."""
    width = max(2, len(str(count)))
    return tuple(f"node-{i:0{width}d}" for i in range(1, count + 1))


class SimFleet:
    """The fleet as a simulation changes it: decisions are applied the way the operator applies them."""

    def __init__(self, names: Iterable[str], revision: rollout.Revision = rollout.Revision.OLD) -> None:
        self.nodes = {n: rollout.Node(n, revision) for n in sorted(names)}

    def snapshot(self) -> rollout.Fleet:
        return rollout.Fleet(tuple(self.nodes.values()), OLD_REVISION, NEW_REVISION, "old template", "old spec.driver")

    def apply(self, decision: rollout.Decision) -> None:
        """Delete the listed driver pods: each comes back on its revision, in flight (neither ready nor failed)."""
        for n in decision.upgrade:
            self.nodes[n] = attrs.evolve(self.nodes[n], revision=rollout.Revision.NEW, ready=False, failed=False)
        for n in decision.rollback:
            self.nodes[n] = attrs.evolve(self.nodes[n], revision=rollout.Revision.OLD, ready=False, failed=False)

    def in_flight(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.in_flight]

    def settle(self, names: Iterable[str], failing: Collection[str] = ()) -> None:
        """In-flight pods among ``names`` finish: on the new driver they fail on ``failing`` nodes, else get ready."""
        for n in names:
            node = self.nodes[n]
            if node.in_flight:
                fails = node.revision is rollout.Revision.NEW and n in failing
                self.nodes[n] = attrs.evolve(node, ready=not fails, failed=fails)

    def set(self, name: str, **changes: Any) -> None:
        self.nodes[name] = attrs.evolve(self.nodes[name], **changes)


def _outcome(status: UpgradeStatus) -> Outcome | None:
    failed = status.condition(ConditionType.FAILED)
    succeed = status.condition(ConditionType.SUCCEED)
    is_failed = failed is not None and failed.status is ConditionStatus.TRUE
    if status.upgrading:
        paused = status.phase is Phase.PROGRESSING and status.status.current_step_state is StepState.STEP_PAUSED
        return Outcome.PAUSED if paused and is_failed else None
    if succeed is not None and succeed.status is ConditionStatus.TRUE:
        return Outcome.COMPLETED
    if failed is not None and failed.reason is Reason.ROLLBACK_FAILED and is_failed:
        return Outcome.FAILED
    return Outcome.ROLLED_BACK


def simulate(
    policy: spec.UpgradePolicy,
    names: Sequence[str],
    failing: Collection[str] = (),
    *,
    start: dt.datetime = EPOCH,
    max_decisions: int | None = None,
    observe: Observer | None = None,
) -> Simulation:
    """Roll ``policy`` out over ``names`` (all on the old driver); nodes in ``failing`` fail every upgrade."""
    fleet = SimFleet(names)
    plans = rollout_plan.plan(policy, len(fleet.nodes))
    batches: list[list[tuple[str, ...]]] = [[] for _ in plans]
    retries: list[list[tuple[str, ...]]] = [[] for _ in plans]
    reached: set[int] = set()
    rolled_back: list[tuple[str, ...]] = []
    budget = max_decisions or 100 + 20 * (len(fleet.nodes) + 1) * (policy.max_failure_threshold + 2)
    status: UpgradeStatus | None = None
    now, started, outcome, count = start, False, Outcome.FAILED, 0
    confirmation: str | None = None
    while count < budget:
        flying = fleet.in_flight()
        snapshot = fleet.snapshot()
        decision = rollout.decide(policy, status, snapshot, now, confirmation)
        count += 1
        if observe is not None:
            observe(decision, snapshot, policy)
        status = decision.status
        step = min(status.status.current_step_index, len(plans) - 1)
        if decision.upgrade:
            retried = {n for n in decision.upgrade if fleet.nodes[n].revision is rollout.Revision.NEW}
            again = tuple(n for n in decision.upgrade if n in retried)
            first = tuple(n for n in decision.upgrade if n not in retried)
            if again:
                retries[step].append(again)
            if first:
                batches[step].append(first)
        if decision.rollback:
            rolled_back.append(decision.rollback)
        fleet.apply(decision)
        if status.phase is Phase.PROGRESSING:
            reached.add(step)
        started = started or status.upgrading
        result = _outcome(status) if started else None
        if not started and decision.requeue_after is None and not decision.upgrade:
            done = all(n.revision is rollout.Revision.NEW for n in fleet.nodes.values())
            result = Outcome.COMPLETED if done else Outcome.FAILED  # no rollout ran (nothing to do, or disabled)
        if result is not None:
            outcome = result
            break
        # The administrator confirms every step that waits, by its token, as `metax-operator rollout confirm` does.
        confirmation = status.status.confirm_token or confirmation
        now += decision.requeue_after or dt.timedelta(0)
        fleet.settle(flying, failing)
    steps = tuple(
        SimStep(p.index, p.target, tuple(batches[p.index]), tuple(retries[p.index]), rollout_plan.pause_label(p.step))
        for p in plans
        if p.index in reached
    )
    final = status if status is not None else UpgradeStatus()
    return Simulation(steps, outcome, tuple(rolled_back), count, now - start, final, tuple(fleet.nodes.values()))
