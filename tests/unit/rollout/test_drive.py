"""One reconcile's turn of the driver rollout (metax_core.rollout.drive, R-ROLLOUT), from gathered inputs.

Aspects: which pods are driver pods; the stored status (absent, readable, unreadable: a problem to log and a
fresh start); the pod choice (the machine's upgrades, never a pod already terminating; this release's
driver-manager brought to a few nodes only when the rollout restarts nothing, within its pace); the template
swap (lastAppliedSpec, with the desired driver-manager image, while rolling back; the desired one otherwise);
when to look again (the machine's requeue, or sooner when a pod not Ready yet turns failed, only while a
rollout runs); the nodes to uncordon (the rollout's cordon marks); driver-manager verdicts that cannot be read.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import attrs

from metax_core.rollout import drive, fleet, machine
from metax_core.rollout import status as rollout_status
from metax_core.spec import validation
from metax_core.wire import driver_verdict, meta

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
OLD_DRIVER, NEW_DRIVER = "registry.example.com/metax/driver-image:2.14.5", "registry.example.com/metax/driver:2.14.6"
OLD_AGENT, NEW_AGENT = "registry.example.com/metax/driver-manager:1", "registry.example.com/metax/driver-manager:2"


def spec(*, enable_rollout: bool = True, max_parallel: int = 1) -> Any:
    return validation.parse(
        {
            "registry": "registry.example.com/metax",
            "driver": {
                "payload": {"version": "2.14.6"},
                "upgradePolicy": {
                    "enableRollout": enable_rollout,
                    "upgradeSteps": [{"replicas": "100%", "pause": False}],
                    "maxParallel": max_parallel,
                },
            },
        }
    )


def daemonset(driver: str = NEW_DRIVER, agent: str = NEW_AGENT) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {meta.COMPONENT_LABEL: "driver"}},
        "spec": {
            "initContainers": [{"name": "payload", "image": driver}],
            "containers": [{"name": "driver-manager", "image": agent}],
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "metax-driver"},
        "spec": {"template": template},
    }


def live(driver: str = NEW_DRIVER, agent: str = NEW_AGENT) -> dict[str, Any]:
    """The DaemonSet on the cluster, stamped by an earlier turn."""
    return fleet.stamped(daemonset(driver, agent), None)


def pod(name: str, node: str, ds: dict[str, Any], *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    """A driver pod as the operator's informer slims it, made from ``ds``'s template."""
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    return {
        "metadata": {
            "name": name,
            "labels": {meta.COMPONENT_LABEL: "driver"},
            "annotations": {
                fleet.REVISION_ANNOTATION: annotations[fleet.REVISION_ANNOTATION],
                fleet.AGENT_ANNOTATION: annotations[fleet.AGENT_ANNOTATION],
            },
            "creationTimestamp": "2026-01-01T11:59:00Z",
            "deletionTimestamp": "2026-01-01T11:59:30Z" if deleting else None,
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "ready": ready, "restarts": 0, "waiting": []},
    }


def turn(
    s: Any, live_ds: dict[str, Any], pods: list[dict[str, Any]], before: drive.Outcome | None, **more: Any
) -> drive.Outcome:
    stored = {"upgradeStatus": rollout_status.to_document(before.status)} if before is not None else None
    return drive.drive(
        s=s,
        desired=daemonset(),
        live_ds=live_ds,
        driver_pods=pods,
        gpu_nodes=sorted({p["spec"]["nodeName"] for p in pods}),
        busy=more.pop("busy", set()),
        cr_status=stored,
        now=NOW,
        ready_timeout=600,
        crash_restarts=3,
        **more,
    )


def test_a_driver_pod_is_known_by_its_component_label() -> None:
    ds = live()
    assert drive.is_driver_pod(pod("d1", "n1", ds))
    assert not drive.is_driver_pod({"metadata": {"labels": {meta.COMPONENT_LABEL: "gpuDevice"}}})
    assert not drive.is_driver_pod({"metadata": {}})


def test_the_stored_status_is_continued_and_an_unreadable_one_starts_afresh_with_a_problem() -> None:
    assert drive.stored_status(None) == (None, "")
    assert drive.stored_status({"upgradeStatus": {}}) == (None, "")
    status = rollout_status.UpgradeStatus(upgrading=True, message="step 1")
    found, problem = drive.stored_status({"upgradeStatus": rollout_status.to_document(status)})
    assert found is not None and found.upgrading and found.message == "step 1" and problem == ""
    found, problem = drive.stored_status({"upgradeStatus": {"phase": "Nope"}})
    assert found is None and "unreadable" in problem and "Nope" in problem


def test_an_unreadable_stored_status_is_reported_and_the_rollout_starts_from_the_fleet() -> None:
    old = live(OLD_DRIVER)
    outcome = drive.drive(
        s=spec(),
        desired=daemonset(),
        live_ds=old,
        driver_pods=[pod("d1", "n1", old)],
        gpu_nodes=["n1"],
        busy=set(),
        cr_status={"upgradeStatus": {"phase": "Nope"}},
        now=NOW,
        ready_timeout=600,
        crash_restarts=3,
    )
    assert outcome.previous is None and outcome.status.upgrading  # a rollout starts, as from no status
    assert any("unreadable" in p for p in outcome.problems)


def test_the_machine_upgrades_a_node_by_deleting_its_driver_pod_and_busy_nodes_wait() -> None:
    s, old = spec(), live(OLD_DRIVER)
    pods = [pod("d1", "n1", old), pod("d2", "n2", old)]
    started = turn(s, old, pods, None)
    assert started.status.upgrading and started.delete_pods == ()  # the first turn records the start only
    assert started.requeue_after == dt.timedelta(0)
    first = turn(s, started.manifest, pods, started, busy={"n1"})
    assert first.upgrade == ("n2",) and first.delete_pods == ("d2",) and first.waiting == ("n1",)
    assert first.agent_restarts == ()


def test_a_pod_already_terminating_is_not_deleted_again() -> None:
    ds = live()
    by_node = {"n1": pod("d1", "n1", ds, deleting=True), "n2": pod("d2", "n2", ds), "n3": pod("d3", "n3", ds)}
    assert drive.pods_to_delete(by_node, {"n1", "n2"}) == ("d2",)
    assert drive.pods_to_delete(by_node, set()) == ()


def test_a_new_driver_manager_reaches_the_nodes_a_few_at_a_time_when_the_rollout_restarts_nothing() -> None:
    s, before = spec(), live(agent=OLD_AGENT)  # same driver, older driver-manager image
    pods = [pod("d2", "n2", before), pod("d1", "n1", before), pod("d3", "n3", before)]
    outcome = turn(s, live(), pods, None, agent_max_unavailable=2)
    assert not outcome.status.upgrading and outcome.upgrade == ()
    assert outcome.delete_pods == ("d1", "d2") and outcome.agent_restarts == ("d1", "d2")  # by node name, 2 at once
    slow = [pod("d1", "n1", before, ready=False), *pods[:1], *pods[2:]]
    assert turn(s, live(), slow, None, agent_max_unavailable=1).delete_pods == ()  # one already not Ready: no room


def test_no_driver_manager_restart_rides_along_a_turn_where_the_rollout_restarts_a_node() -> None:
    s, old = spec(), live(OLD_DRIVER)
    stale_agent = pod("d3", "n3", live(agent=OLD_AGENT))  # already on the new driver, older driver-manager
    pods = [pod("d1", "n1", old), pod("d2", "n2", old), stale_agent]
    started = turn(s, old, pods, None, agent_max_unavailable=5)
    first = turn(s, started.manifest, pods, started, agent_max_unavailable=5)
    assert first.upgrade == ("n1",) and first.delete_pods == ("d1",) and first.agent_restarts == ()


def test_rolling_back_applies_the_stored_template_with_this_releases_driver_manager() -> None:
    old = live(OLD_DRIVER, OLD_AGENT)
    pods = [pod("d1", "n1", old), pod("d2", "n2", old)]
    started = turn(spec(), old, pods, None)
    assert started.manifest["spec"]["template"]["spec"]["initContainers"][0]["image"] == NEW_DRIVER
    back = turn(spec(enable_rollout=False), started.manifest, pods, started)
    assert back.status.phase is rollout_status.Phase.DISABLING
    template = back.manifest["spec"]["template"]
    assert template["spec"]["initContainers"][0]["image"] == OLD_DRIVER  # the driver before the rollout
    assert template["spec"]["containers"][0]["image"] == NEW_AGENT  # but this release's agent
    assert fleet.template_revision(back.manifest) == fleet.template_revision(old)
    assert json.loads(back.status.last_applied_spec) == old["spec"]["template"]


def test_the_desired_template_is_applied_unless_the_machine_wants_the_stored_one_and_has_it() -> None:
    new = live()
    status = rollout_status.UpgradeStatus(last_applied_spec=json.dumps(live(OLD_DRIVER)["spec"]["template"]))
    keep = machine.Decision(status=status, template=machine.Template.NEW)
    assert drive.template_to_apply(keep, new) is new
    swap = machine.Decision(status=status, template=machine.Template.LAST_APPLIED)
    assert drive.template_to_apply(swap, new)["spec"]["template"]["spec"]["initContainers"][0]["image"] == OLD_DRIVER
    nothing_stored = machine.Decision(status=rollout_status.UpgradeStatus(), template=machine.Template.LAST_APPLIED)
    assert drive.template_to_apply(nothing_stored, new) is new


def test_the_operator_looks_again_when_a_starting_pod_would_turn_failed_but_only_during_a_rollout() -> None:
    running = rollout_status.UpgradeStatus(upgrading=True)
    at = NOW + dt.timedelta(seconds=90)
    waits = machine.Decision(status=running, template=machine.Template.NEW, requeue_after=dt.timedelta(seconds=10))
    assert drive.requeue_after(waits, at, NOW) == dt.timedelta(seconds=10)  # the machine's is sooner
    idle_machine = attrs.evolve(waits, requeue_after=None)
    assert drive.requeue_after(idle_machine, at, NOW) == dt.timedelta(seconds=90)
    assert drive.requeue_after(idle_machine, NOW - dt.timedelta(seconds=5), NOW) == dt.timedelta(0)  # overdue
    assert drive.requeue_after(waits, None, NOW) == dt.timedelta(seconds=10)
    idle = machine.Decision(status=rollout_status.UpgradeStatus(), template=machine.Template.NEW)
    assert drive.requeue_after(idle, at, NOW) is None  # no rollout: a pod's timeout is not the rollout's


def test_nodes_the_rollout_cordoned_are_given_back_and_unreadable_verdicts_are_problems() -> None:
    ds = live()
    nodes = [
        {"metadata": {"name": "n1", "annotations": {meta.ROLLOUT_CORDON: "true"}}},
        {"metadata": {"name": "n2", "annotations": {driver_verdict.ANNOTATION: "not a verdict"}}},
        {"metadata": {"name": "n3"}},
    ]
    outcome = turn(spec(), ds, [pod("d1", "n1", ds), pod("d2", "n2", ds)], None, nodes=nodes)
    assert outcome.uncordon == ("n1",)
    assert len(outcome.problems) == 1 and "n2" in outcome.problems[0] and "verdict" in outcome.problems[0]
