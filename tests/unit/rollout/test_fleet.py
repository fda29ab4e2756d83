"""The rollout's view of driver pods (metax_core.rollout.fleet, R-ROLLOUT, R-READY).

Aspects: the failure rule (crash loop, stuck waiting reasons, phase Failed, and Running but not Ready past
the timeout, which is how a driver that does not load is seen); the moment a pod not Ready yet turns failed
(so the operator looks again then); revisions (stamping, a pod behind the desired template); the snapshot
(one pod per node, a terminating pod is in flight, new vs old revision, busy nodes).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from metax_core.rollout import fleet, model
from metax_core.spec.fieldtypes import IntOrPercent

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def pod(
    name: str = "d1",
    node: str = "n1",
    *,
    ready: bool = True,
    phase: str = "Running",
    restarts: int = 0,
    waiting: tuple[str, ...] = (),
    created: str | None = "2026-01-01T11:59:00Z",
    rev: str = "",
    deleting: bool = False,
) -> dict[str, Any]:
    """A pod as `services.operator.informers.slim_pod` makes it."""
    return {
        "metadata": {
            "name": name,
            "annotations": {fleet.REVISION_ANNOTATION: rev} if rev else {},
            "creationTimestamp": created,
            "deletionTimestamp": "2026-01-01T11:59:30Z" if deleting else None,
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase, "ready": ready, "restarts": restarts, "waiting": waiting},
    }


def failed(p: dict[str, Any], now: dt.datetime = NOW) -> bool:
    return fleet.pod_failed(p, now, ready_timeout=120, crash_restarts=3)


def test_a_ready_pod_never_fails() -> None:
    assert not failed(pod(restarts=9, created="2026-01-01T10:00:00Z"))


def test_a_crash_loop_or_stuck_container_fails_at_once() -> None:
    assert failed(pod(ready=False, waiting=("CrashLoopBackOff",)))
    assert failed(pod(ready=False, waiting=("ImagePullBackOff",)))
    assert failed(pod(ready=False, restarts=3))
    assert failed(pod(ready=False, phase="Failed"))
    assert not failed(pod(ready=False, restarts=2, waiting=("ContainerCreating",)))


def test_running_but_not_ready_fails_only_past_the_timeout() -> None:
    running = pod(ready=False, created="2026-01-01T11:58:00Z")  # exactly 120 s old
    assert not failed(running)
    assert failed(running, NOW + dt.timedelta(seconds=1))
    assert fleet.fails_at(running, ready_timeout=120) == NOW
    assert fleet.fails_at(pod(ready=True), ready_timeout=120) is None


def test_a_pod_without_a_creation_time_is_not_failed_by_the_clock() -> None:
    assert not failed(pod(ready=False, created=None), NOW + dt.timedelta(days=1))
    assert not failed(pod(ready=False, created="not a time"), NOW + dt.timedelta(days=1))


def test_stamping_adds_the_template_hash_and_behind_compares_it() -> None:
    ds = {"metadata": {"name": "metax-driver"}, "spec": {"template": TEMPLATE}}
    stamped = fleet.stamped(ds, None)
    rev = fleet.template_revision(stamped)
    assert rev == fleet.revision_of(stamped["spec"]["template"])  # the annotation itself is not hashed
    assert "annotations" not in TEMPLATE["metadata"]  # the input is left alone
    assert not fleet.behind(ds, [pod(rev=str(rev))])
    assert fleet.behind(ds, [pod(rev=str(rev)), pod("d2", "n2", rev="other")])
    payload = {"initContainers": [{"name": "payload-0", "image": "driver-image:2.19"}], "containers": [{"name": "c"}]}
    changed = {**ds, "spec": {"template": {**TEMPLATE, "spec": payload}}}
    assert fleet.template_revision(fleet.stamped(changed, None)) != rev
    env = {"containers": [{"name": "c", "image": "x", "env": [{"name": "METAX_DRIVER_VERSION", "value": "2.19"}]}]}
    assert fleet.template_revision(fleet.stamped({**ds, "spec": {"template": {**TEMPLATE, "spec": env}}}, None)) != rev


def _release(image: str) -> dict[str, Any]:
    """The driver DaemonSet as another operator release renders it: only driver-manager's image differs."""
    template = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": image}]}}
    return fleet.stamped({"metadata": {"name": "metax-driver"}, "spec": {"template": template}}, None)


def test_an_operator_release_alone_is_no_new_driver_revision_but_a_new_agent() -> None:
    """R-UPGRADE: a new operator release changes driver-manager's image; the driver pods' revision stays, so no
    rollout starts or moves, and the agent annotation tells which pods still run the previous release's agent."""
    before, after = _release("registry/metax-driver:0.1.0@sha256:aa"), _release("registry/metax-driver:0.2.0@sha256:bb")
    assert fleet.template_revision(before) == fleet.template_revision(after)
    agents = [b["spec"]["template"]["metadata"]["annotations"][fleet.AGENT_ANNOTATION] for b in (before, after)]
    assert agents[0] != agents[1]
    old_pod = pod(rev=str(fleet.template_revision(before)))
    assert not fleet.behind(after, [old_pod])


def _running(name: str, node: str, release: dict[str, Any], **kw: Any) -> dict[str, Any]:
    p = pod(name, node, rev=str(fleet.template_revision(release)), **kw)
    p["metadata"]["annotations"][fleet.AGENT_ANNOTATION] = release["spec"]["template"]["metadata"]["annotations"][
        fleet.AGENT_ANNOTATION
    ]
    return p


def test_agent_restarts_take_ready_pods_of_the_same_driver_in_name_order_within_max_unavailable() -> None:
    old, new = _release("r/metax-driver:0.1.0"), _release("r/metax-driver:0.2.0")
    pods = {f"n{i}": _running(f"d{i}", f"n{i}", old) for i in (3, 1, 2)}
    assert fleet.agent_restarts(new, pods, 1) == ("n1",)
    assert fleet.agent_restarts(new, pods, 2) == ("n1", "n2")
    assert fleet.agent_restarts(new, pods, 0) == ()
    # one driver pod not Ready (any revision, any agent) uses the budget of 1: nothing more goes now
    going = {**pods, "n1": _running("d1", "n1", new, ready=False)}
    assert fleet.agent_restarts(new, going, 1) == ()
    assert fleet.agent_restarts(new, going, 2) == ("n2",)
    terminating = {**pods, "n1": _running("d1", "n1", old, deleting=True)}
    assert fleet.agent_restarts(new, terminating, 2) == ("n2",)
    # a pod on another driver revision waits for the rollout; a pod already on this agent is done
    other_driver = {"n1": pod("d1", "n1", rev="another-driver"), "n2": _running("d2", "n2", new)}
    assert fleet.agent_restarts(new, other_driver, 5) == ()
    # pods from before the agent annotation existed carry none: they are behind
    assert fleet.agent_restarts(new, {"n9": pod("d9", "n9", rev=str(fleet.template_revision(new)))}, 1) == ("n9",)


def test_a_restored_template_runs_the_current_agent_and_keeps_its_revision() -> None:
    """A rollback goes back to the previous driver (lastAppliedSpec), with this release's driver-manager."""
    import json

    old = _release("r/metax-driver:0.1.0")
    text = json.dumps(old["spec"]["template"])
    current = _release("r/metax-driver:0.2.0")["spec"]["template"]
    restored = fleet.with_agent(text, current)
    assert restored["spec"]["containers"][0]["image"] == "r/metax-driver:0.2.0"
    annotations = restored["metadata"]["annotations"]
    assert annotations[fleet.REVISION_ANNOTATION] == fleet.template_revision(old)
    assert annotations[fleet.AGENT_ANNOTATION] == current["metadata"]["annotations"][fleet.AGENT_ANNOTATION]


NEW_REV = str(fleet.template_revision(fleet.stamped({"metadata": {}, "spec": {"template": TEMPLATE}}, None)))


def _snapshot(
    pods: list[dict[str, Any]],
    *,
    live_rev: str = "old",
    busy: set[str] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 2,
) -> fleet.Snapshot:
    new = fleet.stamped({"metadata": {"name": "metax-driver"}, "spec": {"template": TEMPLATE}}, None)
    live = {
        "metadata": {"generation": generation},
        "spec": {"template": {"metadata": {"annotations": {fleet.REVISION_ANNOTATION: live_rev}}}},
        "status": status or {},
    }
    return fleet.snapshot(
        new_manifest=new,
        live_ds=live,
        driver_pods=pods,
        gpu_nodes=["n1", "n2", "n3"],
        busy=busy or set(),
        now=NOW,
        ready_timeout=120,
        crash_restarts=3,
    )


def test_the_snapshot_sees_a_new_driver_that_does_not_become_ready_as_failed() -> None:
    new_rev = NEW_REV
    pods = [
        pod("d1", "n1", ready=False, rev=new_rev, created="2026-01-01T11:50:00Z"),  # the canary, 10 min not Ready
        pod("d2", "n2", ready=False, rev=new_rev),  # one minute old: still starting
        pod("d3", "n3", rev="old"),
    ]
    snap = _snapshot(pods, busy={"n3"})
    nodes = {n.name: n for n in snap.fleet.nodes}
    assert nodes["n1"] == model.Node("n1", model.Revision.NEW, ready=False, failed=True)
    assert nodes["n2"] == model.Node("n2", model.Revision.NEW, ready=False, failed=False)
    assert nodes["n3"] == model.Node("n3", model.Revision.OLD, ready=True, busy=True)
    assert snap.recheck_at == NOW + dt.timedelta(seconds=60)  # when d2 turns failed if still not Ready
    assert snap.fleet.new_revision == new_rev and snap.fleet.old_revision == "old"


def test_a_terminating_or_missing_pod_is_in_flight_on_the_daemonsets_revision() -> None:
    snap = _snapshot([pod("d1", "n1", rev="old", deleting=True)])
    for node in snap.fleet.nodes:
        assert node.in_flight and node.revision is model.Revision.OLD
    assert snap.recheck_at is None


def test_a_live_pod_wins_over_a_terminating_one_on_the_same_node() -> None:
    new_rev = NEW_REV
    chosen = fleet.pick_pods([pod("old", "n1", rev="old", deleting=True), pod("new", "n1", rev=new_rev)])
    assert chosen["n1"]["metadata"]["name"] == "new"
    chosen = fleet.pick_pods([pod("new", "n1", rev=new_rev), pod("old", "n1", rev="old", deleting=True)])
    assert chosen["n1"]["metadata"]["name"] == "new"


def test_a_gpu_node_the_daemonset_does_not_place_on_is_not_waited_for() -> None:
    """n3 is a GPU node the driver DaemonSet keeps off (a taint it does not tolerate, say): by the DaemonSet
    controller's count every placed node has its pod, so n3 is out of the rollout instead of forever in flight."""
    pods = [pod("d1", "n1", rev="old"), pod("d2", "n2", rev="old")]
    placed = _snapshot(pods, status={"desiredNumberScheduled": 2, "observedGeneration": 2})
    assert [n.name for n in placed.fleet.nodes] == ["n1", "n2"]
    assert not any(n.in_flight for n in placed.fleet.nodes)


def test_while_the_count_is_short_or_stale_a_gpu_node_without_a_pod_is_in_flight() -> None:
    pods = [pod("d1", "n1", rev="old"), pod("d2", "n2", rev="old")]
    for status, generation in (
        ({"desiredNumberScheduled": 3, "observedGeneration": 2}, 2),  # n3's pod deleted, not yet recreated
        ({"desiredNumberScheduled": 2, "observedGeneration": 1}, 2),  # the count is of an older template
        ({}, 2),  # the controller has not counted yet
    ):
        snap = _snapshot(pods, status=status, generation=generation)
        nodes = {n.name: n for n in snap.fleet.nodes}
        assert set(nodes) == {"n1", "n2", "n3"}, status
        assert nodes["n3"].in_flight


def test_the_agents_pace_is_max_unavailable_of_the_driver_pods_rounded_up_and_at_least_one() -> None:
    assert fleet.agent_pace(IntOrPercent(3), 100) == 3
    assert fleet.agent_pace(IntOrPercent.of_percent(10), 95) == 10  # 9.5 rounds up, as a DaemonSet's does
    assert fleet.agent_pace(IntOrPercent.of_percent(1), 5) == 1
    assert fleet.agent_pace(IntOrPercent.of_percent(50), 0) == 1  # never a pace of none
