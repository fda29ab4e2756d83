"""The rollout tests' driver: decides like the operator, applies the decision to a simulated fleet (R-ROLLOUT).

Shared by test_machine.py, test_pauses.py and test_failures.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence

import attrs
import rollout_examples

from metax_core.rollout import machine as rollout
from metax_core.rollout import sim as rollout_sim
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import ConditionStatus as CS
from metax_core.rollout.status import ConditionType as CT
from metax_core.rollout.status import Reason, StepState
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
NAMES = rollout_sim.node_names(10)
SEED = rollout_examples.SEED_POLICY
NO_PAUSES = spec.UpgradePolicy(
    enable_rollout=True,
    upgrade_steps=(spec.UpgradeStep(IoP(2), pause=False), spec.UpgradeStep(IoP.of_percent(100), pause=False)),
)


class Run:
    """Drives the machine like the operator: decide, apply, and let the test change the world in between."""

    def __init__(
        self,
        policy: spec.UpgradePolicy,
        names: Sequence[str] = NAMES,
        revision: rollout.Revision = rollout.Revision.OLD,
    ) -> None:
        self.policy = policy
        self.fleet = rollout_sim.SimFleet(names, revision)
        self.status: rollout_status.UpgradeStatus | None = None
        self.now = T0
        self.new_revision = rollout_sim.NEW_REVISION
        self.confirmation: str | None = None

    def snapshot(self) -> rollout.Fleet:
        return attrs.evolve(self.fleet.snapshot(), new_revision=self.new_revision)

    def decide(self) -> rollout.Decision:
        decision = rollout.decide(self.policy, self.status, self.snapshot(), self.now, self.confirmation)
        self.status = decision.status
        self.fleet.apply(decision)
        return decision

    def confirm(self) -> str:
        """What `metax-operator rollout confirm` does: annotate with the waiting step's token."""
        assert self.status is not None and self.status.status.confirm_token
        self.confirmation = self.status.status.confirm_token
        return self.confirmation

    def settle(self, failing: Collection[str] = ()) -> None:
        self.fleet.settle(self.fleet.in_flight(), failing)

    def pause(self, value: bool) -> None:
        self.policy = attrs.evolve(self.policy, pause=value)

    def until(
        self,
        done: Callable[[rollout.Decision], bool],
        failing: Collection[str] = (),
        resume: bool = True,
        limit: int = 300,
    ) -> rollout.Decision:
        """Decide, settle and resume manual pauses until ``done``; the decision that satisfied it."""
        for _ in range(limit):
            decision = self.decide()
            if done(decision):
                return decision
            if resume and reason(decision) is Reason.WAITING_FOR_ADMIN and not failed(decision):
                self.confirm()
            self.now += decision.requeue_after or dt.timedelta(0)
            self.settle(failing)
        raise AssertionError("the rollout did not get there")

    def revisions(self) -> set[rollout.Revision]:
        return {n.revision for n in self.fleet.nodes.values()}


def condition(d: rollout.Decision, kind: CT) -> rollout_status.Condition:
    found = d.status.condition(kind)
    assert found is not None
    return found


def reason(d: rollout.Decision) -> Reason:
    return condition(d, CT.PROGRESSING).reason


def failed(d: rollout.Decision) -> bool:
    return condition(d, CT.FAILED).status is CS.TRUE


def state(d: rollout.Decision) -> StepState:
    return d.status.status.current_step_state
