"""The driver rollout machine: idling, starting, stepping forward, GPU workloads, bookkeeping (R-ROLLOUT, 001 §3.2.8).

Covers: idling and disabled; starting (template before deletions, what is recorded); the §3.2.8 loops;
waiting for in-flight pods; nodes with GPU workloads waiting, named; timestamps that move only on change;
the snapshot's invariants. Pauses are in test_pauses.py, failures and rollbacks in
test_failures.py.
"""

from __future__ import annotations

import datetime as dt

import attrs
import pytest
from rollout_run import NAMES, NO_PAUSES, SEED, T0, Run, condition, reason, state

from metax_core.rollout import machine as rollout
from metax_core.rollout import sim as rollout_sim
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import ConditionStatus as CS
from metax_core.rollout.status import ConditionType as CT
from metax_core.rollout.status import Phase, Reason, StepState

# --- no rollout ---------------------------------------------------------------------------------------------------


def test_nothing_to_upgrade_is_idling_with_the_daemonset_on_delete() -> None:
    d = Run(SEED, revision=rollout.Revision.NEW).decide()
    assert (d.status.phase, d.status.upgrading, d.template) == (Phase.IDLING, False, rollout.Template.NEW)
    assert (d.upgrade, d.rollback, d.requeue_after, d.ignored_confirmation) == ((), (), None, "")
    assert [(c.type, c.status, c.reason) for c in d.status.conditions] == [
        (CT.PROGRESSING, CS.FALSE, Reason.NO_ROLLOUT),
        (CT.SUCCEED, CS.UNKNOWN, Reason.NO_ROLLOUT),
        (CT.FAILED, CS.FALSE, Reason.NO_FAILURE),
        (CT.TERMINATING, CS.FALSE, Reason.NOT_TERMINATING),
    ]


def test_disabled_rollout_upgrades_every_idle_node_at_once_and_names_the_busy_ones() -> None:
    run = Run(attrs.evolve(SEED, enable_rollout=False), names=("a", "b", "c"))
    run.fleet.set("b", busy=True)
    d = run.decide()
    assert (d.status.phase, d.status.upgrading, d.template, d.upgrade, d.waiting) == (
        Phase.DISABLED,
        False,
        rollout.Template.NEW,
        ("a", "c"),
        ("b",),
    )
    assert (reason(d), d.requeue_after) == (Reason.ROLLOUT_DISABLED, dt.timedelta(seconds=30))
    assert "waiting for GPU workloads to end on b" in d.status.message
    run.settle()
    run.pause(True)
    run.fleet.set("b", busy=False)
    held = run.decide()
    assert (held.upgrade, reason(held)) == ((), Reason.PAUSED_BY_ADMIN)
    run.pause(False)
    assert run.decide().upgrade == ("b",)
    run.settle()
    done = run.decide()
    assert (done.upgrade, done.requeue_after, done.status.phase) == ((), None, Phase.DISABLED)


# --- starting and stepping forward --------------------------------------------------------------------------------


def test_start_records_the_old_revision_and_applies_the_template_before_any_deletion() -> None:
    d = Run(SEED).decide()
    assert (d.status.phase, d.status.upgrading, state(d)) == (Phase.PROGRESSING, True, StepState.STEP_UPGRADE_INIT)
    assert (d.template, d.upgrade, d.requeue_after) == (rollout.Template.NEW, (), dt.timedelta(0))
    assert (d.status.last_applied_spec, d.status.last_co_driver_spec) == ("old template", "old spec.driver")
    s = d.status.status
    assert (s.last_pod_spec_revision, s.upgrading_pod_spec_revision, s.current_step_index) == ("old", "new", 0)
    assert (s.current_upgrade_replicas, s.total_upgrade_replicas, s.total_upgrade_ready_replicas) == (2, 10, 0)
    assert s.last_update_time == T0
    assert [(c.status, c.reason) for c in d.status.conditions] == [
        (CS.TRUE, Reason.ROLLOUT_STARTED),
        (CS.UNKNOWN, Reason.ROLLOUT_IN_PROGRESS),
        (CS.FALSE, Reason.NO_FAILURE),
        (CS.FALSE, Reason.NOT_TERMINATING),
    ]


def test_first_step_of_the_seed_example_runs_two_loops_of_one_then_waits_for_an_admin() -> None:
    run = Run(SEED)
    run.decide()
    first = run.decide()
    assert (first.upgrade, state(first), first.requeue_after) == (
        ("node-01",),
        StepState.STEP_UPGRADE,
        dt.timedelta(seconds=10),
    )
    waiting = run.decide()  # node-01's pod is still restarting
    assert (waiting.upgrade, reason(waiting)) == ((), Reason.STEP_UPGRADING)
    assert "node-01" in waiting.status.message
    run.settle()
    second = run.decide()
    assert second.upgrade == ("node-02",)
    assert second.status.status.current_step_nodes == ("node-01", "node-02")
    run.settle()
    paused = run.decide()
    assert (state(paused), reason(paused)) == (StepState.STEP_PAUSED, Reason.WAITING_FOR_ADMIN)
    token = paused.status.status.confirm_token
    assert "-step1-" in token and f"rollout-confirm={token}" in paused.status.message
    assert paused.status.status.waiting_since == run.now
    s = paused.status.status
    assert (s.current_upgrade_replicas, s.current_upgrade_ready_replicas, s.total_upgrade_ready_replicas) == (2, 2, 2)


def test_nodes_already_on_the_new_driver_count_toward_the_target() -> None:
    run = Run(NO_PAUSES)
    run.fleet.set("node-05", revision=rollout.Revision.NEW)
    run.decide()
    assert run.decide().upgrade == ("node-01",)  # 2 wanted, 1 already new


def test_a_step_with_pause_false_goes_straight_on() -> None:
    run = Run(NO_PAUSES)
    d = run.until(lambda d: state(d) is StepState.STEP_READY)
    assert (d.status.status.confirm_token, d.requeue_after, reason(d)) == ("", dt.timedelta(0), Reason.STEP_READY)
    nxt = run.decide()
    assert (nxt.status.status.current_step_index, state(nxt)) == (1, StepState.STEP_UPGRADE_INIT)
    assert run.decide().upgrade == tuple(NAMES[2:])  # maxParallel 100% of the step's 8 nodes


# --- GPU workloads -----------------------------------------------------------------------------------------------


def test_nodes_running_gpu_workloads_wait_and_are_named() -> None:
    run = Run(NO_PAUSES)
    run.fleet.set("node-01", busy=True)
    run.decide()
    d = run.decide()
    assert d.upgrade == ("node-02", "node-03")
    assert d.waiting == ("node-01",)
    assert "waiting for GPU workloads to end on node-01" in d.status.message


def test_when_every_candidate_is_busy_nothing_starts_until_one_is_idle() -> None:
    run = Run(NO_PAUSES, names=("a", "b"))
    run.fleet.set("a", busy=True)
    run.fleet.set("b", busy=True)
    run.decide()
    d = run.decide()
    assert (d.upgrade, d.waiting, reason(d), d.requeue_after) == (
        (),
        ("a", "b"),
        Reason.WAITING_FOR_IDLE_NODES,
        dt.timedelta(seconds=30),
    )
    assert "a, b" in condition(d, CT.PROGRESSING).message
    run.fleet.set("b", busy=False)
    assert run.decide().upgrade == ("b",)


# --- bookkeeping --------------------------------------------------------------------------------------------------


def test_times_move_only_when_something_changed() -> None:
    run = Run(SEED)
    run.decide()
    run.decide()
    first = run.decide()  # waiting for node-01
    run.now += dt.timedelta(minutes=5)
    later = run.decide()
    assert later.status == first.status
    run.settle()
    run.now += dt.timedelta(minutes=5)
    moved = run.decide()
    assert moved.status.status.last_update_time == run.now
    assert condition(moved, CT.PROGRESSING).last_transition_time == T0  # still True since the start


def test_the_stored_document_is_enough_to_continue() -> None:
    run = Run(SEED)
    run.until(lambda d: state(d) is StepState.STEP_PAUSED and reason(d) is Reason.WAITING_FOR_PAUSE_DURATION)
    stored = rollout_status.from_document(rollout_status.to_document(run.status))  # type: ignore[arg-type]
    assert rollout.decide(run.policy, stored, run.snapshot(), run.now) == rollout.decide(
        run.policy, run.status, run.snapshot(), run.now
    )


def test_same_input_same_decision_and_naive_now_is_utc() -> None:
    run = Run(SEED)
    run.until(lambda d: bool(d.upgrade))
    naive = run.now.replace(tzinfo=None)
    assert rollout.decide(run.policy, run.status, run.snapshot(), naive) == rollout.decide(
        run.policy, run.status, run.snapshot(), run.now
    )


def test_an_empty_fleet_has_nothing_to_roll_out() -> None:
    d = Run(SEED, names=()).decide()
    assert (d.status.phase, d.upgrade, d.status.status.total_upgrade_replicas) == (Phase.IDLING, (), 0)


def test_snapshot_invariants() -> None:
    with pytest.raises(ValueError, match="both ready and failed"):
        rollout.Node("a", rollout.Revision.NEW, ready=True, failed=True)
    with pytest.raises(ValueError, match="unique.*: a"):
        rollout.Fleet((rollout.Node("a", rollout.Revision.OLD), rollout.Node("a", rollout.Revision.NEW)))


def test_a_simulation_with_nothing_to_do_ends_at_once() -> None:
    result = rollout_sim.simulate(SEED, ())
    assert (result.outcome, result.decisions, result.steps) == (rollout_sim.Outcome.COMPLETED, 1, ())
