"""The rollout shell (services.operator.rollout_driver) on real pod shapes: the core's failure rule reads pods
as the informers slim them, one decision from a fleet built out of pods, busy nodes wait, a pod not Ready
yet makes the operator look again when it would turn failed (R-ROLLOUT)."""

from __future__ import annotations

import datetime as dt
import json

from metax_core.cluster import workloads
from metax_core.rollout import fleet
from metax_core.rollout import status as rollout_status
from metax_core.spec import validation
from services.operator import informers, rollout_driver

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def _pod(
    name: str,
    node: str,
    *,
    ready: bool = True,
    restarts: int = 0,
    waiting: str = "",
    created: str = "2026-01-01T11:59:00Z",
    rev: str = "",
    labels: dict | None = None,
) -> dict:
    container: dict = {"name": "c", "image": "x"}
    raw = {
        "metadata": {
            "name": name,
            "namespace": "metax-operator",
            "labels": labels if labels is not None else {workloads.COMPONENT_LABEL: "driver"},
            "annotations": {fleet.REVISION_ANNOTATION: rev} if rev else {},
            "creationTimestamp": created,
        },
        "spec": {"nodeName": node, "containers": [container]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"restartCount": restarts, "state": {"waiting": {"reason": waiting}} if waiting else {}}
            ],
        },
    }
    return raw


def test_the_failure_rule_reads_pods_as_the_informers_slim_them() -> None:
    def failed(pod: dict) -> bool:
        return fleet.pod_failed(informers.slim_pod(pod), NOW, ready_timeout=120, crash_restarts=3)

    assert not failed(_pod("a", "n1"))
    assert not failed(_pod("a", "n1", ready=False))  # one minute old: still starting
    assert failed(_pod("a", "n1", ready=False, created="2026-01-01T11:50:00Z"))  # not ready after 10 minutes
    assert failed(_pod("a", "n1", ready=False, waiting="CrashLoopBackOff"))
    assert failed(_pod("a", "n1", ready=False, restarts=3))


def test_a_new_template_starts_a_rollout_and_upgrades_the_first_loop() -> None:
    s = validation.parse(
        {
            "registry": "registry.example.com/metax",
            "driver": {
                "payload": {"version": "2.14.6"},
                "upgradePolicy": {
                    "enableRollout": True,
                    "upgradeSteps": [{"replicas": "100%", "pause": False}],
                    "maxParallel": 1,
                },
            },
        }
    )
    desired = next(
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    )
    old_template = json.loads(json.dumps(desired["spec"]["template"]))
    old_template["spec"]["initContainers"][0]["image"] = (
        "registry.example.com/metax/driver-image:2.14.5"  # the old driver payload
    )
    old_ds = fleet.stamped({**desired, "spec": {**desired["spec"], "template": old_template}}, None)
    old_rev = old_ds["spec"]["template"]["metadata"]["annotations"][fleet.REVISION_ANNOTATION]
    pods = [informers.slim_pod(_pod(f"d{i}", f"n{i}", rev=old_rev)) for i in (1, 2)]
    first = rollout_driver.drive(
        s=s,
        desired=desired,
        live_ds=old_ds,
        driver_pods=pods,
        gpu_nodes=["n1", "n2"],
        busy=set(),
        cr_status=None,
        now=NOW,
        ready_timeout=600,
        crash_restarts=3,
    )
    assert first.status.upgrading and first.delete_pods == ()
    second = rollout_driver.drive(
        s=s,
        desired=desired,
        live_ds=first.manifest,
        driver_pods=pods,
        gpu_nodes=["n1", "n2"],
        busy={"n1"},
        cr_status={"upgradeStatus": rollout_status.to_document(first.status)},
        now=NOW,
        ready_timeout=600,
        crash_restarts=3,
    )
    assert second.delete_pods == ("d2",) and second.waiting == ("n1",)  # n1 runs a GPU job: it waits
    assert json.loads(first.status.last_applied_spec) == old_ds["spec"]["template"]


def test_behind_says_whether_a_driver_pod_runs_another_revision() -> None:
    s = validation.parse({"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.14.6"}}})
    desired = next(
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    )
    rev = fleet.stamped(desired, None)["spec"]["template"]["metadata"]["annotations"][fleet.REVISION_ANNOTATION]
    assert not fleet.behind(desired, [informers.slim_pod(_pod("d", "n", rev=rev))])
    assert fleet.behind(desired, [informers.slim_pod(_pod("d", "n", rev="other"))])


def test_a_new_driver_pod_not_ready_in_time_fails_the_step_and_is_looked_at_again_at_its_deadline() -> None:
    s = validation.parse(
        {
            "registry": "registry.example.com/metax",
            "driver": {
                "payload": {"version": "2.14.6"},
                "upgradePolicy": {
                    "enableRollout": True,
                    "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
                    "maxParallel": 1,
                },
            },
        }
    )
    desired = next(
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    )
    old_template = json.loads(json.dumps(desired["spec"]["template"]))
    old_template["spec"]["initContainers"][0]["image"] = (
        "registry.example.com/metax/driver-image:2.14.5"  # the old driver payload
    )
    old_ds = fleet.stamped({**desired, "spec": {**desired["spec"], "template": old_template}}, None)
    old_rev = old_ds["spec"]["template"]["metadata"]["annotations"][fleet.REVISION_ANNOTATION]

    def drive(pods: list[dict], live: dict, cr_status: dict | None) -> rollout_driver.Outcome:
        return rollout_driver.drive(
            s=s,
            desired=desired,
            live_ds=live,
            driver_pods=[informers.slim_pod(p) for p in pods],
            gpu_nodes=["n1", "n2"],
            busy=set(),
            cr_status=cr_status,
            now=NOW,
            ready_timeout=600,
            crash_restarts=3,
        )

    old_pods = [_pod(f"d{i}", f"n{i}", rev=old_rev) for i in (1, 2)]
    started = drive(old_pods, old_ds, None)
    canary = drive(old_pods, started.manifest, {"upgradeStatus": rollout_status.to_document(started.status)})
    assert canary.delete_pods == ("d1",)
    new_rev = fleet.template_revision(canary.manifest)
    state = {"upgradeStatus": rollout_status.to_document(canary.status)}
    starting = [_pod("d1b", "n1", ready=False, rev=str(new_rev)), old_pods[1]]  # one minute old, Running
    waiting = drive(starting, canary.manifest, state)
    assert waiting.delete_pods == () and waiting.status.upgrading
    assert waiting.requeue_after is not None and waiting.requeue_after <= dt.timedelta(seconds=540)
    stuck = [_pod("d1b", "n1", ready=False, rev=str(new_rev), created="2026-01-01T11:49:00Z"), old_pods[1]]
    failed = drive(stuck, canary.manifest, state)
    assert failed.delete_pods == ()  # the second node is never started: fallback pause (the default)
    condition = failed.status.condition(rollout_status.ConditionType.FAILED)
    assert condition is not None and condition.status.value == "True", failed.status
    assert failed.status.status.current_step_state is rollout_status.StepState.STEP_PAUSED, failed.status
