"""The driver rollout machine, situation by situation (R-ROLLOUT, 001 §3.2.8).

Covers: idling and disabled; starting (template before deletions, what is recorded); the §3.2.8 loops;
waiting for in-flight pods; nodes with GPU workloads waiting, named; pause: true holding everything; the
manual pause and its acknowledgement; timed pauses resuming exactly at recheckTime; toleration; retries then
the fallback (pause, then resume; rollback, then pinned); maxUnavailable at the end; enableRollout: false
(Disabling → Disabled, then re-enabling); a failed rollback; a target changed mid-rollout; timestamps that
move only on change; the snapshot's invariants.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence

import attrs
import pytest
import rollout_examples

from metax_core.rollout import machine as rollout
from metax_core.rollout import sim as rollout_sim
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import ConditionStatus as CS
from metax_core.rollout.status import ConditionType as CT
from metax_core.rollout.status import Phase, Reason, StepState
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


# --- pause --------------------------------------------------------------------------------------------------------


def test_pause_true_lets_in_flight_nodes_finish_and_starts_nothing() -> None:
    run = Run(NO_PAUSES)
    run.decide()
    assert run.decide().upgrade == ("node-01", "node-02")
    run.pause(True)
    held = run.decide()
    assert (held.upgrade, reason(held)) == ((), Reason.PAUSED_BY_ADMIN)
    run.settle()
    done = run.decide()  # the step's own nodes are done: it may finish, but the next step waits
    assert (done.upgrade, state(done)) == ((), StepState.STEP_READY)
    for _ in range(3):
        d = run.decide()
        assert (d.upgrade, d.rollback, d.requeue_after, state(d)) == ((), (), None, StepState.STEP_READY)
        assert reason(d) is Reason.PAUSED_BY_ADMIN
    run.pause(False)
    run.decide()
    assert run.decide().upgrade == tuple(NAMES[2:])


def test_a_waiting_step_is_confirmed_only_by_its_token_never_by_pause() -> None:
    """Issue 16: no re-apply of the declared spec (pause: false, again and again) confirms a step."""
    run = Run(SEED)
    waiting = run.until(lambda d: state(d) is StepState.STEP_PAUSED, resume=False)
    assert (reason(waiting), waiting.requeue_after) == (Reason.WAITING_FOR_ADMIN, None)
    for pause in (True, False, True, False):
        run.pause(pause)
        d = run.decide()
        assert (state(d), d.upgrade) == (StepState.STEP_PAUSED, ())
        assert d.status.status.confirm_token == waiting.status.status.confirm_token
    run.confirmation = "new-step1-00000000"  # an older rollout's token
    stale = run.decide()
    assert (state(stale), stale.upgrade) == (StepState.STEP_PAUSED, ())
    assert "ignored" in stale.ignored_confirmation and waiting.status.status.confirm_token in stale.ignored_confirmation
    run.confirm()
    confirmed = run.decide()
    assert (state(confirmed), confirmed.requeue_after, confirmed.ignored_confirmation) == (
        StepState.STEP_READY,
        dt.timedelta(0),
        "",
    )
    assert confirmed.status.status.confirm_token == "" and confirmed.status.status.waiting_since is None
    run.decide()
    assert run.decide().upgrade == ("node-03", "node-04")


def test_pause_holds_a_confirmed_step_and_releasing_the_hold_confirms_nothing_more() -> None:
    run = Run(SEED)
    run.pause(True)
    run.decide()
    run.pause(False)
    waiting = run.until(lambda d: state(d) is StepState.STEP_PAUSED, resume=False)
    run.pause(True)
    run.confirm()
    held = run.decide()
    assert (state(held), held.upgrade) == (StepState.STEP_PAUSED, ())
    assert "pause is true" in held.status.message
    run.pause(False)
    assert state(run.decide()) is StepState.STEP_READY
    # the next manual wait (step 4) has its own token: step 1's confirmation does not reach it
    later = run.until(lambda d: state(d) is StepState.STEP_PAUSED and reason(d) is Reason.WAITING_FOR_ADMIN)
    assert later.status.status.confirm_token not in ("", waiting.status.status.confirm_token)


def timed_run() -> tuple[Run, rollout.Decision, dt.datetime]:
    """A run whose second step just finished and started its 10 s pause; and when that pause ends."""
    run = Run(SEED)
    d = run.until(lambda d: reason(d) is Reason.WAITING_FOR_PAUSE_DURATION)
    recheck = d.status.status.recheck_time
    assert recheck is not None
    return run, d, recheck


def test_timed_pause_resumes_exactly_at_recheck_time_and_not_before() -> None:
    run, d, recheck = timed_run()
    assert recheck == run.now + dt.timedelta(milliseconds=10_000)
    assert d.requeue_after == dt.timedelta(seconds=10)
    run.now = recheck - dt.timedelta(microseconds=1)
    early = run.decide()
    assert (state(early), early.requeue_after) == (StepState.STEP_PAUSED, dt.timedelta(microseconds=1))
    run.now = recheck
    on_time = run.decide()
    assert (state(on_time), on_time.status.status.recheck_time) == (StepState.STEP_READY, None)


def test_timed_pause_holds_past_recheck_time_while_pause_is_true() -> None:
    run, _, recheck = timed_run()
    run.pause(True)
    run.now = recheck + dt.timedelta(hours=1)
    held = run.decide()
    assert (state(held), reason(held), held.requeue_after) == (StepState.STEP_PAUSED, Reason.PAUSED_BY_ADMIN, None)
    run.pause(False)
    assert state(run.decide()) is StepState.STEP_READY


def test_a_node_that_fails_during_a_pause_is_caught_before_the_next_step() -> None:
    run, _, recheck = timed_run()
    run.fleet.set("node-04", ready=False, failed=True)
    run.now = recheck
    assert state(run.decide()) is StepState.STEP_READY
    retry = run.decide()
    assert (retry.upgrade, reason(retry), retry.status.status.current_failure_retry) == (
        ("node-04",),
        Reason.STEP_RETRYING,
        1,
    )


# --- failures -----------------------------------------------------------------------------------------------------


def test_failures_within_the_step_toleration_do_not_stop_it() -> None:
    policy = attrs.evolve(
        NO_PAUSES,
        upgrade_steps=(
            spec.UpgradeStep(IoP(2), pause=False, toleration=IoP.of_percent(50)),
            spec.UpgradeStep(IoP.of_percent(100), pause=False),
        ),
        max_unavailable=IoP(1),
    )
    run = Run(policy)
    d = run.until(lambda d: not d.status.upgrading, failing={"node-01"})
    assert (d.status.phase, condition(d, CT.SUCCEED).status) == (Phase.IDLING, CS.TRUE)
    assert d.status.status.current_failure_retry == 0
    assert "node-01" in condition(d, CT.SUCCEED).message


def test_retries_then_fallback_pause_then_an_admin_resume_retries_once_more() -> None:
    policy = attrs.evolve(NO_PAUSES, max_failure_threshold=2)
    run = Run(policy)
    retries = []
    d: rollout.Decision | None = None
    for _ in range(40):
        d = run.decide()
        if d.upgrade == ("node-02",) and reason(d) is Reason.STEP_RETRYING:
            retries.append(d.status.status.current_failure_retry)
        if failed(d):
            break
        run.now += d.requeue_after or dt.timedelta(0)
        run.settle({"node-02"})
    assert d is not None and retries == [1, 2]
    assert (d.status.phase, state(d), reason(d)) == (Phase.PROGRESSING, StepState.STEP_PAUSED, Reason.FALLBACK_PAUSED)
    assert d.status.status.confirm_token
    assert condition(d, CT.FAILED).reason is Reason.STEP_FAILED
    assert "node-02" in condition(d, CT.FAILED).message
    assert condition(d, CT.PROGRESSING).status is CS.FALSE
    run.pause(True)
    run.pause(False)  # a Helm re-apply: no retry
    still = run.decide()
    assert (reason(still), still.upgrade) == (Reason.FALLBACK_PAUSED, ())
    run.confirm()
    resumed = run.decide()
    assert (resumed.upgrade, resumed.status.status.current_failure_retry) == (("node-02",), 0)
    assert (condition(resumed, CT.FAILED).status, condition(resumed, CT.FAILED).reason) == (
        CS.FALSE,
        Reason.RESUMED_AFTER_FAILURE,
    )


def test_fallback_rollback_returns_every_node_and_stays_pinned() -> None:
    policy = attrs.evolve(NO_PAUSES, fallback=spec.Fallback.ROLLBACK, max_parallel=IoP(1))
    run = Run(policy, names=("a", "b", "c"))
    begin = run.until(lambda d: d.status.phase is Phase.TERMINATING, failing={"b"})
    assert (begin.template, begin.rollback, state(begin)) == (
        rollout.Template.LAST_APPLIED,
        (),
        StepState.STEP_UPGRADE_INIT,
    )
    assert (condition(begin, CT.TERMINATING).status, condition(begin, CT.TERMINATING).reason) == (
        CS.TRUE,
        Reason.FALLBACK_ROLLBACK,
    )
    assert condition(begin, CT.FAILED).reason is Reason.STEP_FAILED
    loops = []
    for _ in range(20):
        d = run.decide()
        if d.rollback:
            loops.append(d.rollback)
        if not d.status.upgrading:
            break
        run.settle()
    assert loops == [("a",), ("b",)]
    assert (d.status.phase, d.template, run.revisions()) == (
        Phase.IDLING,
        rollout.Template.LAST_APPLIED,
        {rollout.Revision.OLD},
    )
    assert (condition(d, CT.SUCCEED).reason, condition(d, CT.FAILED).status) == (Reason.ROLLED_BACK, CS.TRUE)
    pinned = run.decide()
    assert (pinned.status.phase, pinned.template, pinned.upgrade, pinned.status.upgrading) == (
        Phase.IDLING,
        rollout.Template.LAST_APPLIED,
        (),
        False,
    )
    run.policy = attrs.evolve(run.policy, enable_rollout=False)
    assert run.decide().template is rollout.Template.LAST_APPLIED
    run.policy = attrs.evolve(run.policy, enable_rollout=True)
    assert run.decide().status.phase is Phase.PROGRESSING


def test_too_many_failed_nodes_at_the_end_fail_the_rollout() -> None:
    tolerant = spec.UpgradeStep(IoP.of_percent(100), pause=False, toleration=IoP.of_percent(100))
    policy = attrs.evolve(NO_PAUSES, upgrade_steps=(tolerant,), max_unavailable=IoP(1))
    run = Run(policy)
    d = run.until(lambda d: failed(d) or not d.status.upgrading, failing={"node-03", "node-07"})
    assert (condition(d, CT.FAILED).reason, reason(d)) == (Reason.TOO_MANY_UNAVAILABLE, Reason.FALLBACK_PAUSED)
    assert "node-03, node-07" in condition(d, CT.FAILED).message
    ok = Run(attrs.evolve(policy, max_unavailable=IoP.of_percent(20)))
    done = ok.until(lambda d: not d.status.upgrading, failing={"node-03", "node-07"})
    assert condition(done, CT.SUCCEED).status is CS.TRUE


# --- enableRollout: false -----------------------------------------------------------------------------------------


def test_enable_rollout_false_rolls_back_to_disabled_then_true_starts_again() -> None:
    run = Run(attrs.evolve(SEED, max_parallel=IoP(0)))
    run.until(lambda d: d.status.status.current_step_index == 1 and bool(d.upgrade))
    run.policy = attrs.evolve(run.policy, enable_rollout=False)
    begin = run.decide()
    assert (begin.status.phase, begin.template, begin.rollback) == (Phase.DISABLING, rollout.Template.LAST_APPLIED, ())
    assert condition(begin, CT.TERMINATING).reason is Reason.ROLLOUT_DISABLED
    waiting = run.decide()  # node-03..05 are still restarting on the new driver
    assert (waiting.rollback, waiting.requeue_after) == ((), dt.timedelta(seconds=10))
    run.settle()
    back = run.decide()
    assert back.rollback == ("node-01", "node-02", "node-03", "node-04", "node-05")
    assert back.status.status.current_upgrade_replicas == 5
    run.settle()
    done = run.decide()
    assert (done.status.phase, done.status.upgrading, done.template) == (
        Phase.DISABLED,
        False,
        rollout.Template.LAST_APPLIED,
    )
    assert run.revisions() == {rollout.Revision.OLD}
    assert condition(done, CT.SUCCEED).reason is Reason.ROLLED_BACK
    assert run.decide().template is rollout.Template.LAST_APPLIED  # pinned while the target is the same
    run.policy = attrs.evolve(run.policy, enable_rollout=True)
    assert run.decide().status.phase is Phase.PROGRESSING


def test_a_rollback_holds_while_pause_is_true() -> None:
    run = Run(NO_PAUSES)
    run.decide()
    run.decide()
    run.settle()
    run.policy = attrs.evolve(run.policy, enable_rollout=False, pause=True)
    run.decide()
    held = run.decide()
    assert (held.rollback, reason(held)) == ((), Reason.PAUSED_BY_ADMIN)
    run.pause(False)
    assert run.decide().rollback == ("node-01", "node-02")


def test_a_node_the_old_driver_fails_on_is_retried_then_reported() -> None:
    run = Run(attrs.evolve(NO_PAUSES, max_failure_threshold=1))
    run.decide()
    run.decide()
    run.settle()
    run.policy = attrs.evolve(run.policy, enable_rollout=False)
    run.decide()
    assert run.decide().rollback == ("node-01", "node-02")
    run.settle()
    run.fleet.set("node-02", ready=False, failed=True)
    retry = run.decide()
    assert (retry.rollback, reason(retry)) == (("node-02",), Reason.STEP_RETRYING)
    run.fleet.set("node-02", ready=False, failed=True)
    done = run.decide()
    assert (done.status.phase, condition(done, CT.FAILED).reason) == (Phase.DISABLED, Reason.ROLLBACK_FAILED)
    assert "node-02" in done.status.message


def test_a_changed_target_restarts_the_rollout_from_the_first_step() -> None:
    run = Run(SEED)
    run.until(lambda d: d.status.status.current_step_index == 1)
    run.new_revision = "newer"
    d = run.decide()
    s = d.status.status
    assert (reason(d), s.current_step_index, s.current_step_state) == (
        Reason.TARGET_CHANGED,
        0,
        StepState.STEP_UPGRADE_INIT,
    )
    assert (s.last_pod_spec_revision, s.upgrading_pod_spec_revision) == ("old", "newer")
    assert d.status.last_applied_spec == "old template"


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
