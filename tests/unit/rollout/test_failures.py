"""The driver rollout machine's failures and rollbacks (R-ROLLOUT, 001 §3.2.8).

Covers: toleration; retries then the fallback (pause, then resume; rollback, then pinned); maxUnavailable at
the end; enableRollout: false (Disabling → Disabled, then re-enabling); a failed rollback; a target changed
mid-rollout.
"""

from __future__ import annotations

import datetime as dt

import attrs
from rollout_run import NO_PAUSES, SEED, Run, condition, failed, reason, state

from metax_core.rollout import machine as rollout
from metax_core.rollout.status import ConditionStatus as CS
from metax_core.rollout.status import ConditionType as CT
from metax_core.rollout.status import Phase, Reason, StepState
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

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


# --- onCanaryFailure ------------------------------------------------------------------------------------------------

CANARY_FIRST = attrs.evolve(
    NO_PAUSES,
    upgrade_steps=(spec.UpgradeStep(IoP(1), pause=False), spec.UpgradeStep(IoP.of_percent(100), pause=False)),
    max_failure_threshold=3,  # would retry three times: onCanaryFailure: rollback does not
    fallback=spec.Fallback.PAUSE,
)


def _decisions_until_rolled_back(run: Run, failing: set[str]) -> list[rollout.Decision]:
    seen = []
    for _ in range(40):
        seen.append(d := run.decide())
        if condition(d, CT.SUCCEED).reason is Reason.ROLLED_BACK:
            return seen
        run.now += d.requeue_after or dt.timedelta(0)
        run.settle(failing)
    raise AssertionError("the rollout was not rolled back")


def test_a_failed_canary_is_rolled_back_at_once_without_retries_and_no_other_node_is_touched() -> None:
    """Issue 41 item 2: onCanaryFailure: rollback."""
    run = Run(attrs.evolve(CANARY_FIRST, on_canary_failure=spec.OnCanaryFailure.ROLLBACK))
    seen = _decisions_until_rolled_back(run, failing={"node-01"})
    assert [d.upgrade for d in seen if d.upgrade] == [("node-01",)]  # the canary once: no retry round
    assert [d.rollback for d in seen if d.rollback] == [("node-01",)]
    begun = next(d for d in seen if d.status.phase is Phase.TERMINATING)
    terminating, failure = condition(begun, CT.TERMINATING), condition(begun, CT.FAILED)
    assert (terminating.reason, failure.reason, failure.status) == (
        Reason.CANARY_ROLLBACK,
        Reason.CANARY_FAILED,
        CS.TRUE,
    )
    assert "node-01" in failure.message and "onCanaryFailure: rollback" in begun.status.message
    end = seen[-1]
    assert (end.status.phase, end.status.status.current_failure_retry) == (Phase.IDLING, 0)
    assert run.revisions() == {rollout.Revision.OLD}


def test_without_on_canary_failure_the_canary_gets_its_retries_then_the_fallback() -> None:
    for policy in (CANARY_FIRST, attrs.evolve(CANARY_FIRST, on_canary_failure=spec.OnCanaryFailure.FALLBACK)):
        run = Run(policy)
        d = run.until(failed, failing={"node-01"})
        assert (reason(d), d.status.status.current_failure_retry) == (Reason.FALLBACK_PAUSED, 3)


def test_on_canary_failure_rollback_leaves_failures_of_later_steps_to_the_fallback() -> None:
    run = Run(attrs.evolve(CANARY_FIRST, on_canary_failure=spec.OnCanaryFailure.ROLLBACK))
    d = run.until(failed, failing={"node-05"})
    assert (reason(d), condition(d, CT.FAILED).reason) == (Reason.FALLBACK_PAUSED, Reason.STEP_FAILED)
    assert d.status.status.current_step_index == 1 and d.status.status.current_failure_retry == 3
