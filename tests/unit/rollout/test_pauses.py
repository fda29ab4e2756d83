"""The driver rollout machine's pauses (R-ROLLOUT, 001 §3.2.8).

Covers: pause: true holding everything while in-flight nodes finish; the manual pause and its
acknowledgement by confirm token only; timed pauses resuming exactly at recheckTime; a node failing during a
pause.
"""

from __future__ import annotations

import datetime as dt

import attrs
from rollout_run import NAMES, NO_PAUSES, SEED, Run, reason, state

from metax_core.rollout import machine as rollout
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import Reason, StepState
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

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


def test_a_consumed_confirmation_never_warns_again_across_steps_and_restarts() -> None:
    """Issue 41 item 5: the administrator's previous confirmation stays in the annotation while the next step
    waits; it is not reported as ignored, also when every decision starts from the stored document (an
    operator restart between any two decisions keeps nothing else). A wrong value warns once."""
    manual = spec.UpgradeStep(IoP(1))
    three = attrs.evolve(SEED, upgrade_steps=(manual, spec.UpgradeStep(IoP(2)), spec.UpgradeStep(IoP.of_percent(100))))
    run = Run(three, NAMES[:3])
    warnings: list[str] = []
    confirmed_steps = []
    waited = 0
    for _ in range(200):
        d = run.decide()
        warnings += [d.ignored_confirmation] if d.ignored_confirmation else []
        run.status = rollout_status.from_document(rollout_status.to_document(d.status))  # the stored truth only
        if run.status.status.confirm_token and run.confirmation != run.status.status.confirm_token:
            assert d.status.status.last_confirmation == (run.confirmation or "")  # the consumed one, kept
            waited += 1
            if waited < 4:  # the administrator takes a while: the step is decided again (and again) meanwhile
                continue
            confirmed_steps.append(run.status.status.current_step_index)
            run.confirm()
            waited = 0
        if d.status.phase is rollout_status.Phase.IDLING and run.revisions() == {rollout.Revision.NEW}:
            break
        run.now += d.requeue_after or dt.timedelta(0)
        run.settle()
    assert (confirmed_steps, warnings, run.revisions()) == ([0, 1, 2], [], {rollout.Revision.NEW})
    run.new_revision = "rev-3"  # the next rollout: its first step waits while the old token is still there
    for name in run.fleet.nodes:
        run.fleet.set(name, revision=rollout.Revision.OLD)
    run.until(lambda d: state(d) is StepState.STEP_PAUSED, resume=False)
    assert run.decide().ignored_confirmation == ""
    run.confirmation = "rev-3-step1-00000000"  # a mistyped token: one warning, then quiet
    assert "ignored" in run.decide().ignored_confirmation
    assert [run.decide().ignored_confirmation for _ in range(3)] == ["", "", ""]
