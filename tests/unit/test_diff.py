"""What an edit of cluster-operator would do, predicted before it is applied (R-DIFF, R-ROLLOUT, R-DEP).

Aspects: the same spec changes nothing; a global toleration changes every DaemonSet's template, so every
node's pods of every component restart and the driver changes on every node at once (no rollout); a disabled
component's DaemonSet and RBAC are deleted and its pods removed, and its dependents' too (R-DEP); a driver
version bump with ``enableRollout`` changes only the driver, through the rollout machine's plan (the plan of
`rollout plan` for the same nodes); an edit during a rollout is refused as the webhook refuses it; with no
cluster-operator yet, everything is created; the diff text is a unified diff of the changed fields.
"""

from __future__ import annotations

from typing import Any

import attrs

from metax_core.cluster import diff, render_settings
from metax_core.rollout import sim
from metax_core.rollout import status as rollout_status
from metax_core.spec import validation

SETTINGS = render_settings.RenderSettings(version="0.1.0")
BASE: dict[str, Any] = {"registry": "r.example.com", "driver": {"payload": {"version": "2.20.0"}}}
NODES = ("gpu-a", "gpu-b", "gpu-c")
PODS = {
    "metax-gpu-discovery": (*NODES, "cpu-a"),
    "metax-gpu-label": NODES,
    "metax-driver": NODES,
    "metax-gpu-device": NODES,
    "metax-vfio-manager": NODES,
    "metax-container-runtime": NODES,
    "metax-maca": NODES,
    "metax-topo-worker": NODES,
    "metax-topo-master": ("gpu-b",),
}


def predict(new: dict[str, Any], live: dict[str, Any] | None = BASE, **kwargs: Any) -> diff.Prediction:
    return diff.predict(
        validation.parse(live) if live is not None else None,
        validation.parse(new),
        settings=SETTINGS,
        pods_on=PODS,
        **kwargs,
    )


def test_the_same_spec_changes_nothing() -> None:
    p = predict(BASE)
    assert (p.objects, p.restarts, p.driver, p.changes) == ((), (), None, False)


def test_a_global_toleration_restarts_every_component_on_its_nodes() -> None:
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    p = predict({**BASE, "tolerations": [toleration]})
    restarted = {r.workload: r.nodes for r in p.restarts}
    assert restarted == {name: tuple(sorted(nodes)) for name, nodes in PODS.items() if name != diff.DRIVER_WORKLOAD}, (
        restarted
    )
    assert all("spec.template.spec.tolerations" in r.why for r in p.restarts)
    assert p.driver is not None and p.driver.mode is diff.DriverMode.ALL_AT_ONCE and p.driver.nodes == NODES
    label = next(o for o in p.objects if o.name == "metax-gpu-label")
    assert label.action is diff.Action.UPDATE
    assert "+      - effect: NoSchedule\n+        key: maintenance\n+        operator: Exists\n" in label.diff
    assert label.diff.startswith("--- live/DaemonSet/metax-gpu-label\n+++ new/DaemonSet/metax-gpu-label\n")


def test_a_disabled_component_and_its_dependents_are_removed() -> None:
    p = predict({**BASE, "maca": {"deploy": False}})
    deleted = {(o.kind, o.name) for o in p.objects if o.action is diff.Action.DELETE}
    assert {("DaemonSet", "metax-maca"), ("DaemonSet", "metax-gpu-device"), ("ServiceAccount", "metax-maca")} <= deleted
    removed = {r.workload: r.nodes for r in p.restarts}
    assert removed == {"metax-maca": NODES, "metax-gpu-device": NODES}  # gpu-device needs maca (R-DEP)
    assert all(r.action is diff.Action.DELETE for r in p.restarts) and p.driver is None


def test_a_driver_bump_with_rollout_follows_the_rollout_plan() -> None:
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
        "maxParallel": 1,
    }
    live = {**BASE, "driver": {**BASE["driver"], "upgradePolicy": policy}}
    new = {**live, "driver": {**live["driver"], "payload": {"version": "2.21.0"}}}
    p = predict(new, live)
    assert p.restarts == ()  # only the driver changes, and only through the rollout
    assert p.driver is not None and p.driver.mode is diff.DriverMode.ROLLOUT and p.driver.plan is not None
    expected = sim.simulate(validation.parse(new).driver.upgrade_policy, NODES)
    assert [s.batches for s in p.driver.plan.steps] == [s.batches for s in expected.steps]
    assert [len(s.batches) for s in p.driver.plan.steps] == [1, 2]
    assert {o.name for o in p.objects} == {"metax-driver"}
    assert p.driver.on_failure == "every step: 0 retries, then fallback pause"
    assert p.driver.on_busy == "wait for its GPU workloads to end (drain is off)"


def _driver_bump(policy: dict[str, Any]) -> diff.Prediction:
    """The prediction for a new payload version under ``policy`` (a rollout starts)."""
    live = {**BASE, "driver": {**BASE["driver"], "upgradePolicy": policy}}
    return predict({**live, "driver": {**live["driver"], "payload": {"version": "2.21.0"}}}, live)


def test_a_driver_bump_predicts_what_a_failed_canary_does() -> None:
    """Issue 41: `diff` predicts onCanaryFailure: rollback before the edit is applied."""
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
        "maxFailureThreshold": 1,
        "onCanaryFailure": "rollback",
    }
    p = _driver_bump(policy)
    assert p.driver is not None and p.driver.on_failure == (
        "a failed canary (step 1) is rolled back at once (onCanaryFailure: rollback); "
        "later steps: 1 retry, then fallback pause"
    )


def test_a_driver_bump_predicts_the_drain() -> None:
    """Issue 41: `diff` says what happens to busy nodes before the edit is applied."""
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": "100%", "pause": False}],
        "maxParallel": 2,
        "drain": {"enable": True, "timeoutSeconds": 90, "force": True, "podSelector": {"team": "ml"}},
    }
    p = _driver_bump(policy)
    assert p.driver is not None and p.driver.on_busy == (
        "drain it: cordon, evict its GPU pods with labels {'team': 'ml'} through the Eviction API, bare pods too, "
        "at most 2 nodes at a time; released after 90s if they do not leave"
    )


def test_an_edit_during_a_rollout_is_refused() -> None:
    running = rollout_status.UpgradeStatus(upgrading=True, phase=rollout_status.Phase.PROGRESSING)
    p = predict({**BASE, "gpuLabel": {"log": {"level": "debug"}}}, rollout=running)
    assert [e.path for e in p.refused] == ["gpuLabel.log.level"]
    assert "cannot change while a driver rollout is in progress" in p.refused[0].message


def test_without_cluster_operator_everything_is_created() -> None:
    p = predict(BASE, live=None)
    assert p.objects and all(o.action is diff.Action.CREATE for o in p.objects)
    assert all(r.nodes == () for r in p.restarts)


def test_a_prediction_is_a_pure_value() -> None:
    assert predict(BASE) == predict(BASE) and attrs.has(diff.Prediction)


def test_turning_dra_on_creates_its_objects_and_restarts_gpu_device_once_for_its_new_affinity() -> None:
    """R-DRA (docs/dra.md): the DeviceClasses and the dra-driver DaemonSet are created; gpu-device's template
    gains the allocation affinity, so its pods are replaced once; a later node label moves only that node."""
    p = predict({**BASE, "draDriver": {"deploy": True}})
    created = {(o.kind, o.name) for o in p.objects if o.action is diff.Action.CREATE}
    assert {
        ("DaemonSet", "metax-dra-driver"),
        ("DeviceClass", "gpu.metax-tech.com"),
        ("DeviceClass", "vfio-gpu.metax-tech.com"),
        ("ServiceAccount", "metax-dra-driver"),
    } <= created
    restarted = {r.workload: (r.action, r.nodes) for r in p.restarts}
    assert restarted["metax-gpu-device"] == (diff.Action.UPDATE, NODES)
    assert "spec.template.spec.affinity" in next(r.why for r in p.restarts if r.workload == "metax-gpu-device")
    assert p.driver is None
