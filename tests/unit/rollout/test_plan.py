"""Policy arithmetic of the driver rollout (Table 3.11): step targets, loop sizes, tolerations, pauses.

Covers: the §3.2.8 10-node example's numbers; replicas rounding up, at least one, capped at the fleet and
never below an earlier step; maxParallel as int, % rounded up, 0 unlimited, "0%" one; toleration and
maxUnavailable rounding down; the implied final step; how each step pauses.
"""

from __future__ import annotations

import pytest
import rollout_examples

from metax_core.rollout import plan as rollout_plan
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

SEED_POLICY = rollout_examples.SEED_POLICY


def test_seed_example_targets_sizes_and_loops() -> None:
    plans = rollout_plan.plan(SEED_POLICY, 10)
    assert [p.target for p in plans] == [2, 5, 8, 10]
    assert [p.size for p in plans] == [2, 3, 3, 2]
    assert [p.loop for p in plans] == [1, 2, 2, 1]
    assert [rollout_plan.pause_label(p.step) for p in plans] == ["manual", "10000ms", "10000ms", "manual"]


@pytest.mark.parametrize(
    ("replicas", "total", "target"),
    [
        (IoP.of_percent(1), 10, 1),  # 0.1 rounds up to 1
        (IoP.of_percent(10), 10, 1),
        (IoP.of_percent(11), 10, 2),  # 1.1 rounds up
        (IoP.of_percent(100), 7, 7),
        (IoP(3), 10, 3),
        (IoP(30), 10, 10),  # capped at the fleet
        (IoP(0), 10, 1),  # at least one (validation refuses 0 anyway)
        (IoP.of_percent(50), 0, 0),  # an empty fleet has nothing to upgrade
    ],
)
def test_replicas_round_up_at_least_one_at_most_the_fleet(replicas: IoP, total: int, target: int) -> None:
    assert rollout_plan.raw_target(replicas, total) == target


def test_a_step_never_targets_fewer_nodes_than_an_earlier_one() -> None:
    policy = spec.UpgradePolicy(
        upgrade_steps=(
            spec.UpgradeStep(IoP(8)),
            spec.UpgradeStep(IoP.of_percent(50)),
            spec.UpgradeStep(IoP.of_percent(100)),
        )
    )
    plans = rollout_plan.plan(policy, 10)
    assert [p.target for p in plans] == [8, 8, 10]
    assert [p.size for p in plans] == [8, 0, 2]


@pytest.mark.parametrize(
    ("max_parallel", "size", "loop"),
    [
        (IoP(0), 7, 7),  # 0 = no limit: the whole step at once
        (IoP(0), 0, 1),
        (IoP(3), 7, 3),
        (IoP(3), 2, 3),  # larger than the step does no harm: a loop never exceeds what is left
        (IoP.of_percent(50), 3, 2),  # 1.5 rounds up
        (IoP.of_percent(50), 1, 1),
        (IoP.of_percent(0), 5, 1),  # "0%" is at least one, not "no limit"
        (IoP.of_percent(100), 5, 5),
    ],
)
def test_loop_size(max_parallel: IoP, size: int, loop: int) -> None:
    assert rollout_plan.loop_size(max_parallel, size) == loop


@pytest.mark.parametrize(
    ("value", "size", "tolerated"),
    [(IoP.of_percent(0), 10, 0), (IoP.of_percent(25), 3, 0), (IoP.of_percent(50), 3, 1), (IoP(2), 3, 2)],
)
def test_toleration_rounds_down(value: IoP, size: int, tolerated: int) -> None:
    assert rollout_plan.toleration(value, size) == tolerated


def test_max_unavailable_is_a_share_of_the_whole_fleet_rounded_down() -> None:
    policy = spec.UpgradePolicy(max_unavailable=IoP.of_percent(15))
    assert rollout_plan.max_unavailable(policy, 10) == 1
    assert rollout_plan.max_unavailable(policy, 20) == 3
    assert rollout_plan.max_unavailable(spec.UpgradePolicy(max_unavailable=IoP(2)), 5) == 2


def test_a_policy_that_does_not_reach_every_node_gets_an_implied_manual_last_step() -> None:
    policy = spec.UpgradePolicy(upgrade_steps=(spec.UpgradeStep(IoP(2), pause=False),))
    steps = rollout_plan.steps(policy)
    assert steps == (spec.UpgradeStep(IoP(2), pause=False), rollout_plan.IMPLIED_LAST_STEP)
    assert rollout_plan.pause_kind(steps[-1]) is rollout_plan.PauseKind.MANUAL
    assert rollout_plan.steps(spec.UpgradePolicy()) == (rollout_plan.IMPLIED_LAST_STEP,)
    assert rollout_plan.steps(SEED_POLICY) == SEED_POLICY.upgrade_steps


@pytest.mark.parametrize(
    ("step", "kind", "label"),
    [
        (spec.UpgradeStep(IoP(1)), rollout_plan.PauseKind.MANUAL, "manual"),
        (spec.UpgradeStep(IoP(1), pause=True), rollout_plan.PauseKind.MANUAL, "manual"),
        (spec.UpgradeStep(IoP(1), pause=False), rollout_plan.PauseKind.NONE, None),
        (spec.UpgradeStep(IoP(1), pause_duration=1500), rollout_plan.PauseKind.TIMED, "1500ms"),
        # Both set is refused by validation; the machine reads it the safe way: a human decides.
        (spec.UpgradeStep(IoP(1), pause=True, pause_duration=1500), rollout_plan.PauseKind.MANUAL, "manual"),
        (spec.UpgradeStep(IoP(1), pause=False, pause_duration=1500), rollout_plan.PauseKind.TIMED, "1500ms"),
    ],
)
def test_how_a_step_pauses(step: spec.UpgradeStep, kind: rollout_plan.PauseKind, label: str | None) -> None:
    assert rollout_plan.pause_kind(step) is kind
    assert rollout_plan.pause_label(step) == label


def test_step_at_clamps_a_stale_index() -> None:
    plans = rollout_plan.plan(SEED_POLICY, 10)
    assert rollout_plan.step_at(plans, 9).index == 3
    assert rollout_plan.step_at(plans, -1).index == 0
