"""Properties of the driver rollout machine over random policies, fleets and administrators (hypothesis).

At every decision of a random run (pods finishing in any order, nodes getting busy and idle, pause toggled,
enableRollout switched off at a random moment):
- the same inputs give the same decision, and the status round-trips through its document form;
- a loop starts only when no driver pod is in flight, and never has more nodes than maxParallel allows
  (with enableRollout: false there is no canary: every idle node at once);
- no step makes more nodes new than its target; a node with GPU workloads is never restarted;
- with pause: true nothing starts, in either direction.
At the end of every run: a rollback left every node on the old driver; enableRollout: false ended Disabled
with every node old; a completed rollout left every node new.
Over whole simulated rollouts: failures within every step's toleration and maxUnavailable never trigger the
fallback, and failures beyond them always do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metax_core.rollout import machine as rollout
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout import sim as rollout_sim
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import (
    ConditionStatus,
    ConditionType,
    Phase,
    Reason,
    StepState,
)
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def counts(low: int, high: int) -> st.SearchStrategy[IoP]:
    return st.integers(low, high).map(IoP) | st.integers(0, 100).map(IoP.of_percent)


@st.composite
def steps(draw: st.DrawFn) -> spec.UpgradeStep:
    pause = draw(st.sampled_from(["manual", "none", "timed"]))
    return spec.UpgradeStep(
        replicas=draw(st.integers(1, 12).map(IoP) | st.integers(1, 100).map(IoP.of_percent)),
        pause=False if pause == "none" else None,
        pause_duration=draw(st.sampled_from([0, 1500, 60_000])) if pause == "timed" else None,
        toleration=draw(counts(0, 3)),
    )


@st.composite
def policies(draw: st.DrawFn) -> spec.UpgradePolicy:
    written = draw(st.lists(steps(), min_size=0, max_size=4))
    last = draw(steps())
    if draw(st.booleans()):  # the shape validation insists on; the other half checks the machine is total
        last = attrs.evolve(last, replicas=IoP.of_percent(100))
    return spec.UpgradePolicy(
        enable_rollout=True,
        upgrade_steps=(*tuple(written), last),
        max_parallel=draw(counts(0, 4)),
        max_unavailable=draw(counts(0, 3)),
        max_failure_threshold=draw(st.integers(0, 2)),
        fallback=draw(st.sampled_from(spec.Fallback)),
    )


def loop_bound(policy: spec.UpgradePolicy, d: rollout.Decision, total: int) -> int:
    s = d.status.status
    if d.status.phase is Phase.DISABLED:
        return total  # no canary: every idle node at once
    if d.rollback:
        return rollout_plan.loop_size(policy.max_parallel, s.current_upgrade_replicas)
    return rollout_plan.step_at(rollout_plan.plan(policy, total), s.current_step_index).loop


def check_decision(
    policy: spec.UpgradePolicy,
    prev: rollout_status.UpgradeStatus | None,
    fleet: rollout.Fleet,
    now: dt.datetime,
    d: rollout.Decision,
    confirmation: str | None = None,
) -> None:
    assert rollout.decide(policy, prev, fleet, now, confirmation) == d
    assert rollout_status.from_document(rollout_status.to_document(d.status)) == d.status
    assert d.status.upgrading == (d.status.phase in rollout_status.ACTIVE_PHASES)
    by_name = {n.name: n for n in fleet.nodes}
    if d.status.phase is Phase.PROGRESSING and d.upgrade:
        # issue 41 item 5: started plus still to start, never above the step's own size (a loop's nodes, still on
        # the old revision as it begins, were counted twice)
        step = rollout_plan.step_at(rollout_plan.plan(policy, len(fleet.nodes)), d.status.status.current_step_index)
        assert d.status.status.current_upgrade_replicas <= step.size, (d.status.status, step)
    moving = d.upgrade + d.rollback
    assert not (d.upgrade and d.rollback)
    if policy.pause:
        assert moving == ()
    if not moving:
        return
    if d.status.phase is not Phase.DISABLED:  # without a canary every idle node goes at once
        assert not any(n.in_flight for n in fleet.nodes)
    assert not any(by_name[n].busy for n in moving)
    assert len(moving) <= loop_bound(policy, d, len(fleet.nodes))
    if d.rollback:
        assert d.template is rollout.Template.LAST_APPLIED
        assert all(by_name[n].revision is rollout.Revision.NEW or by_name[n].failed for n in d.rollback)
    if d.upgrade and d.status.phase is Phase.DISABLED:
        assert not policy.enable_rollout and d.template is rollout.Template.NEW
    elif d.upgrade:
        assert d.template is rollout.Template.NEW
        new_before = sum(1 for n in fleet.nodes if n.revision is rollout.Revision.NEW)
        first_time = [n for n in d.upgrade if by_name[n].revision is rollout.Revision.OLD]
        plan = rollout_plan.step_at(rollout_plan.plan(policy, len(fleet.nodes)), d.status.status.current_step_index)
        assert new_before + len(first_time) <= max(plan.target, new_before)


def fallback_paused(status: rollout_status.UpgradeStatus) -> bool:
    failed = status.condition(ConditionType.FAILED)
    return (
        status.phase is Phase.PROGRESSING
        and status.status.current_step_state is StepState.STEP_PAUSED
        and failed is not None
        and failed.status is ConditionStatus.TRUE
    )


@SETTINGS
@given(policy=policies(), size=st.integers(1, 9), data=st.data())
def test_invariants_hold_at_every_decision_of_a_random_run(
    policy: spec.UpgradePolicy, size: int, data: st.DataObject
) -> None:
    names = rollout_sim.node_names(size)
    failing = data.draw(st.frozensets(st.sampled_from(names)), label="failing")
    disable_at = data.draw(st.none() | st.integers(0, 40), label="disable_at")
    fleet = rollout_sim.SimFleet(names)
    status: rollout_status.UpgradeStatus | None = None
    now, disabled_while_active = T0, False
    confirmation: str | None = None
    for i in range(600):
        snapshot = fleet.snapshot()
        d = rollout.decide(policy, status, snapshot, now, confirmation)
        check_decision(policy, status, snapshot, now, d, confirmation)
        status = d.status
        fleet.apply(d)
        if i == disable_at:
            disabled_while_active = status.upgrading
            policy = attrs.evolve(policy, enable_rollout=False)
        calm = i >= 40
        settled = not status.upgrading and d.requeue_after is None
        if calm and ((fallback_paused(status) and policy.enable_rollout) or settled):
            break
        if not calm:
            flying = fleet.in_flight()
            fleet.settle(data.draw(st.sets(st.sampled_from(flying))) if flying else (), failing)
            busy = data.draw(st.none() | st.sampled_from(names), label="toggle busy")
            if busy is not None:
                fleet.set(busy, busy=not fleet.nodes[busy].busy)
            if data.draw(st.integers(0, 9), label="toggle pause") == 0:
                policy = attrs.evolve(policy, pause=not policy.pause)
            now += d.requeue_after or dt.timedelta(seconds=1)
            continue
        fleet.settle(fleet.in_flight(), failing)
        for name in names:
            fleet.set(name, busy=False)
        policy = attrs.evolve(policy, pause=False)  # lift any hold
        progressing = status.condition(ConditionType.PROGRESSING)
        if progressing is not None and progressing.reason is Reason.WAITING_FOR_ADMIN:
            confirmation = status.status.confirm_token  # confirm a manual pause
        now += d.requeue_after or dt.timedelta(0)
    else:
        raise AssertionError(f"the run did not settle: {status.message if status else ''}")
    assert status is not None
    revisions = {n.revision for n in fleet.nodes.values()}
    succeed = status.condition(ConditionType.SUCCEED)
    if not status.upgrading and succeed is not None and succeed.reason is Reason.ROLLED_BACK:
        assert revisions == {rollout.Revision.OLD}
    if disabled_while_active:
        assert (status.phase, revisions) == (Phase.DISABLED, {rollout.Revision.OLD})
    if succeed is not None and succeed.status is ConditionStatus.TRUE and not status.upgrading:
        assert revisions == {rollout.Revision.NEW}


def expected_members(policy: spec.UpgradePolicy, names: Sequence[str]) -> list[tuple[str, ...]]:
    """With no busy node and no node already new, step k upgrades the next names in order."""
    plans = rollout_plan.plan(policy, len(names))
    return [tuple(names[p.target - p.size : p.target]) for p in plans]


@SETTINGS
@given(policy=policies(), size=st.integers(1, 10), data=st.data())
def test_failures_within_toleration_never_trigger_the_fallback(
    policy: spec.UpgradePolicy, size: int, data: st.DataObject
) -> None:
    names = rollout_sim.node_names(size)
    failing = data.draw(st.frozensets(st.sampled_from(names)))
    result = rollout_sim.simulate(policy, names, failing)
    plans = rollout_plan.plan(policy, size)
    members = expected_members(policy, names)
    for step in result.steps:  # a step the fallback stopped has done only a prefix of its nodes
        upgraded = tuple(n for loop in step.batches for n in loop)
        assert upgraded == members[step.index][: len(upgraded)]
        if step.index < result.steps[-1].index or result.outcome is rollout_sim.Outcome.COMPLETED:
            assert upgraded == members[step.index]
    within = all(len(failing & set(m)) <= p.toleration for m, p in zip(members, plans, strict=False))
    within = within and len(failing) <= rollout_plan.max_unavailable(policy, size)
    if within:
        assert result.outcome is rollout_sim.Outcome.COMPLETED
        assert all(step.retries == () for step in result.steps)
        assert {n.revision for n in result.nodes} == {rollout.Revision.NEW}
    else:
        assert result.outcome in (rollout_sim.Outcome.PAUSED, rollout_sim.Outcome.ROLLED_BACK)
        if result.outcome is rollout_sim.Outcome.ROLLED_BACK:
            assert {n.revision for n in result.nodes} == {rollout.Revision.OLD}
            assert policy.fallback is spec.Fallback.ROLLBACK


def any_count() -> st.SearchStrategy[IoP]:
    return st.builds(IoP, st.integers(-2, 15), st.booleans())


@st.composite
def any_policy(draw: st.DrawFn) -> spec.UpgradePolicy:
    """Policies validation would refuse too: the machine must still answer."""
    step = st.builds(
        spec.UpgradeStep, any_count(), st.none() | st.booleans(), st.none() | st.integers(-5, 5000), any_count()
    )
    return spec.UpgradePolicy(
        draw(st.booleans()),
        tuple(draw(st.lists(step, max_size=4))),
        draw(st.booleans()),
        draw(any_count()),
        draw(any_count()),
        draw(st.integers(-1, 3)),
        draw(st.sampled_from(spec.Fallback)),
    )


@st.composite
def any_node(draw: st.DrawFn, name: str) -> rollout.Node:
    ready = draw(st.booleans())
    return rollout.Node(
        name, draw(st.sampled_from(rollout.Revision)), ready, draw(st.booleans()) and not ready, draw(st.booleans())
    )


@SETTINGS
@given(policy=any_policy(), data=st.data())
def test_decide_is_total_over_any_stored_status_fleet_and_policy(
    policy: spec.UpgradePolicy, data: st.DataObject
) -> None:
    names = data.draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), unique=True, max_size=5))
    nodes = tuple(data.draw(any_node(n)) for n in names)
    known = st.sampled_from(["a", "b", "c", "gone"])
    times = st.none() | st.datetimes(timezones=st.just(dt.UTC) | st.none())
    reasons = st.sampled_from(Reason)
    condition = st.builds(
        rollout_status.Condition,
        st.sampled_from(ConditionType),
        st.sampled_from(ConditionStatus),
        st.datetimes(timezones=st.just(dt.UTC)),
        reasons,
    )
    stored = st.builds(
        rollout_status.UpgradeStatus,
        upgrading=st.booleans(),
        conditions=st.lists(condition, max_size=5).map(tuple),
        phase=st.sampled_from(Phase),
        status=st.builds(
            rollout_status.StepStatus,
            upgrading_pod_spec_revision=st.sampled_from(["old", "new"]),
            current_step_index=st.integers(0, 6),
            current_failure_retry=st.integers(0, 4),
            current_step_state=st.sampled_from(StepState),
            recheck_time=times,
            current_step_nodes=st.lists(known, unique=True).map(lambda v: tuple(sorted(v))),
            pending_retry_nodes=st.lists(known, unique=True).map(lambda v: tuple(sorted(v))),
        ),
    )
    previous = data.draw(st.none() | stored)
    fleet = rollout.Fleet(nodes, "old", data.draw(st.sampled_from(["new", "newer"])))
    now = data.draw(st.datetimes(timezones=st.just(dt.UTC)))
    d = rollout.decide(policy, previous, fleet, now)
    assert rollout.decide(policy, previous, fleet, now) == d
    assert rollout_status.from_document(rollout_status.to_document(d.status)) == d.status
    assert d.requeue_after is None or d.requeue_after >= dt.timedelta(0)
    assert set(d.upgrade + d.rollback) <= set(names)
    if policy.pause:
        assert d.upgrade + d.rollback == ()


@SETTINGS
@given(toggles=st.lists(st.booleans(), min_size=1, max_size=30), stale=st.none() | st.text(min_size=1, max_size=20))
def test_no_sequence_of_spec_re_applies_confirms_a_waiting_step(toggles: list[bool], stale: str | None) -> None:
    """Issue 16: pause flipping (Helm, GitOps) and any other annotation value never move a waiting step."""
    manual = spec.UpgradeStep(IoP(1), pause=None)
    policy = spec.UpgradePolicy(enable_rollout=True, upgrade_steps=(manual, spec.UpgradeStep(IoP.of_percent(100))))
    fleet = rollout_sim.SimFleet(rollout_sim.node_names(3))
    status: rollout_status.UpgradeStatus | None = None
    now = T0
    for _ in range(10):
        d = rollout.decide(policy, status, fleet.snapshot(), now)
        status = d.status
        fleet.apply(d)
        fleet.settle(fleet.in_flight(), ())
        if status.status.current_step_state is StepState.STEP_PAUSED:
            break
    assert status is not None and status.status.confirm_token
    token = status.status.confirm_token
    for pause in toggles:
        now += dt.timedelta(minutes=1)
        d = rollout.decide(attrs.evolve(policy, pause=pause), status, fleet.snapshot(), now, stale)
        assert (d.upgrade, d.status.status.current_step_state) == ((), StepState.STEP_PAUSED)
        assert d.status.status.confirm_token == token
        status = d.status
