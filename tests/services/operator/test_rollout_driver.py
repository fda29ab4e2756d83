"""The rollout shell's gathering rules (services.operator.rollout_driver): failed pods, busy nodes, revisions,
and one decision from a fleet built out of pods (R-ROLLOUT)."""

from __future__ import annotations

import datetime as dt
import json

from metax_core.cluster import workloads
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
            "annotations": {rollout_driver.REVISION_ANNOTATION: rev} if rev else {},
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


def test_a_driver_pod_fails_when_it_crash_loops_or_is_not_ready_in_time() -> None:
    def failed(pod: dict) -> bool:
        return rollout_driver.pod_failed(informers.slim_pod(pod), NOW, ready_timeout=120, crash_restarts=3)

    assert not failed(_pod("a", "n1"))
    assert not failed(_pod("a", "n1", ready=False))  # one minute old: still starting
    assert failed(_pod("a", "n1", ready=False, created="2026-01-01T11:50:00Z"))  # not ready after 10 minutes
    assert failed(_pod("a", "n1", ready=False, waiting="CrashLoopBackOff"))
    assert failed(_pod("a", "n1", ready=False, restarts=3))


def test_a_new_template_starts_a_rollout_and_upgrades_the_first_loop() -> None:
    s = validation.parse(
        {
            "driver": {
                "payload": {"version": "2.14.6"},
                "upgradePolicy": {
                    "enableRollout": True,
                    "upgradeSteps": [{"replicas": "100%", "pause": False}],
                    "maxParallel": 1,
                },
            }
        }
    )
    desired = next(
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    )
    old_template = json.loads(json.dumps(desired["spec"]["template"]))
    old_template["spec"]["containers"][0]["image"] = "old:1"
    old_ds = rollout_driver.stamped({**desired, "spec": {**desired["spec"], "template": old_template}}, None)
    old_rev = old_ds["spec"]["template"]["metadata"]["annotations"][rollout_driver.REVISION_ANNOTATION]
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
    s = validation.parse({"driver": {"payload": {"version": "2.14.6"}}})
    desired = next(
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    )
    rev = rollout_driver.stamped(desired, None)["spec"]["template"]["metadata"]["annotations"][
        rollout_driver.REVISION_ANNOTATION
    ]
    assert not rollout_driver.behind(desired, [informers.slim_pod(_pod("d", "n", rev=rev))])
    assert rollout_driver.behind(desired, [informers.slim_pod(_pod("d", "n", rev="other"))])
