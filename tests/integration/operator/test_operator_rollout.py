"""The driver rollout driven by the running operator on ten kwok nodes (R-ROLLOUT, issue 16).

Aspects: the order and grouping of driver-pod deletions observed on the API equal `metax-operator rollout
plan` for the same policy and node names; a step that waits is confirmed only by `metax-operator rollout
confirm` — Helm-style re-applies (pause toggled, an unrelated field changed) do not confirm it; pause holds;
the operator owns no field of spec (managedFields); a failing new driver pod pauses the rollout (fallback);
a node running a GPU workload is not upgraded until the workload ends, and the status names it; the leader
SIGKILLed mid-rollout: the other replica takes over and never has more than maxParallel nodes in flight.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_helpers import NS, Env, cluster_operator, wait_for
from rollout_helpers import SEED_POLICY, DeletionRecorder, confirm, extra_gpu_nodes, rollout_plan

from metax_dev.controlplane import cluster as controlplane

pytestmark = pytest.mark.integration


def upgrade(env: Env) -> dict[str, Any]:
    return dict((env.cr().get("status") or {}).get("upgradeStatus") or {})


def waiting_step(env: Env) -> int | None:
    st = upgrade(env).get("status") or {}
    return int(st.get("currentStepIndex", 0)) + 1 if st.get("confirmToken") else None


def seen_latest(env: Env) -> bool:
    cr = env.cr()
    return (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]


def install(env: Env, policy: dict[str, Any], names: list[str]) -> dict[str, Any]:
    spec = cluster_operator()["spec"]
    spec["driver"]["upgradePolicy"] = policy
    env.api.apply(cluster_operator(spec), field_manager="helm")
    env.start_operator()
    wait_for("driver pods on every node", lambda: env.running_nodes("driver") == set(names), timeout=120)
    wait_for("no rollout", lambda: upgrade(env).get("phase") == "Idling" and seen_latest(env))
    return spec


def new_driver(env: Env, spec: dict[str, Any], level: str = "debug") -> None:
    spec["driver"]["log"] = {"level": level}  # a new driver pod template: a rollout begins
    env.api.apply(cluster_operator(spec), field_manager="helm")


def test_a_rollout_follows_the_plan_and_waits_for_confirmations_only(
    operator_env: Env, control_plane: controlplane.ControlPlane, tmp_path: Path
) -> None:
    env = operator_env
    with extra_gpu_nodes(control_plane, env, "ro", 10) as names:
        spec = install(env, SEED_POLICY, names)
        recorder = DeletionRecorder(env.api, names).start()
        new_driver(env, spec)
        wait_for("step 1 waits", lambda: waiting_step(env) == 1, timeout=120)
        token = upgrade(env)["status"]["confirmToken"]
        assert f"metax-tech.com/rollout-confirm={token}" in upgrade(env)["message"]
        for pause in (True, False):  # what Helm or a GitOps controller re-applies
            spec["driver"]["upgradePolicy"] = {**SEED_POLICY, "pause": pause}
            env.api.apply(cluster_operator(spec), field_manager="helm")
        spec["gpuDevice"] = {"healthyInterval": 7}
        env.api.apply(cluster_operator(spec), field_manager="helm")
        wait_for("the operator saw the re-applies", lambda: seen_latest(env))
        assert waiting_step(env) == 1 and upgrade(env)["status"]["confirmToken"] == token
        assert "confirmed step 1" in confirm(env.kubeconfig, 1)
        wait_for("step 4 waits", lambda: waiting_step(env) == 4, timeout=180)
        confirm(env.kubeconfig, 4)
        wait_for("rollout complete", lambda: upgrade(env).get("phase") == "Idling", timeout=120)
        recorder.stop()
        assert recorder.snapshot() == rollout_plan(SEED_POLICY, names, tmp_path)
        for entry in env.cr()["metadata"].get("managedFields") or []:
            if entry["manager"] == "metax-operator":
                assert "f:spec" not in (entry.get("fieldsV1") or {}), entry


def test_a_gpu_workload_holds_its_node_until_it_ends(
    operator_env: Env, control_plane: controlplane.ControlPlane, tmp_path: Path
) -> None:
    env = operator_env
    policy = {"enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pause": False}], "maxParallel": 0}
    with extra_gpu_nodes(control_plane, env, "busy", 3) as names:
        spec = install(env, policy, names)
        busy = names[0]
        job = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-job", "namespace": NS},
            "spec": {
                "nodeName": busy,
                "containers": [{"name": "job", "image": "job", "resources": {"limits": {"metax-tech.com/gpu": "1"}}}],
            },
        }
        env.api.create(job)
        wait_for(
            "job running",
            lambda: (env.api.get("v1", "Pod", "gpu-job", NS).get("status") or {}).get("phase") == "Running",
        )
        before = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in env.pods("driver")}
        new_driver(env, spec)
        wait_for(
            "the status names the busy node",
            lambda: busy in upgrade(env).get("message", "") and "GPU workloads" in upgrade(env).get("message", ""),
            timeout=90,
        )
        wait_for("the idle nodes upgraded", lambda: all(_replaced(env, before, n) for n in names[1:]), timeout=90)
        assert not _replaced(env, before, busy)
        env.api.delete("v1", "Pod", "gpu-job", NS)
        wait_for("the busy node upgraded after the job", lambda: _replaced(env, before, busy), timeout=90)
        wait_for("rollout complete", lambda: upgrade(env).get("phase") == "Idling", timeout=90)


def occupy(env: Env, node: str) -> None:
    """A GPU workload on ``node`` (a pod that is not ours and requests metax-tech.com/gpu)."""
    env.api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"gpu-job-{node}", "namespace": NS, "labels": {"test": "gpu-job"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "job", "image": "job", "resources": {"limits": {"metax-tech.com/gpu": "1"}}}],
            },
        }
    )


def release(env: Env, nodes: list[str]) -> None:
    for node in nodes:
        env.api.delete("v1", "Pod", f"gpu-job-{node}", NS)


def _replaced(env: Env, before: dict[str, str], node: str) -> bool:
    return any(p["spec"].get("nodeName") == node and p["metadata"]["uid"] != before[node] for p in env.pods("driver"))


def test_a_failing_new_driver_pod_pauses_the_rollout(
    operator_env: Env, control_plane: controlplane.ControlPlane, tmp_path: Path
) -> None:
    env = operator_env
    policy = {  # one node at a time: the first node's pod crashes while the step still runs
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 3, "pause": False}, {"replicas": "100%", "pause": False}],
        "maxParallel": 1,
    }
    with extra_gpu_nodes(control_plane, env, "fail", 4) as names:
        spec = install(env, policy, names)
        for node in names[1:]:  # only the first node may start: the crash is seen while the step runs
            occupy(env, node)
        first = names[0]
        before = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in env.pods("driver")}
        new_driver(env, spec)
        pod = wait_for("a new driver pod on the first node", lambda: _new_pod(env, before, first), timeout=90)
        crash_loop(env, pod)
        failed = wait_for(
            "fallback pause",
            lambda: next(
                (c for c in upgrade(env).get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None
            ),
            timeout=90,
        )
        assert first in failed["message"]
        assert waiting_step(env) == 1  # the fallback waits for a confirmation to retry
        release(env, names[1:])


def _new_pod(env: Env, before: dict[str, str], node: str) -> str | None:
    """The new driver pod on ``node`` once kwok has made it Ready (so kwok leaves its status alone after)."""
    for p in env.pods("driver"):
        if (
            p["spec"].get("nodeName") == node
            and p["metadata"]["uid"] != before[node]
            and not p["metadata"].get("deletionTimestamp")
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        ):
            return str(p["metadata"]["name"])
    return None


def _holder(env: Env) -> str | None:
    try:
        lease = env.api.get("coordination.k8s.io/v1", "Lease", "metax-operator-leader", NS)
    except Exception:
        return None
    return (lease.get("spec") or {}).get("holderIdentity")


def test_the_leader_sigkilled_mid_rollout_the_other_replica_finishes_within_max_parallel(
    operator_env: Env, control_plane: controlplane.ControlPlane, tmp_path: Path
) -> None:
    env = operator_env
    policy = {"enableRollout": True, "upgradeSteps": [{"replicas": "100%", "pause": False}], "maxParallel": 2}
    with extra_gpu_nodes(control_plane, env, "ha", 6) as names:
        spec = install(env, policy, names)
        env.start_operator("op-b")
        holder = wait_for("a leader", lambda: _holder(env))
        recorder = DeletionRecorder(env.api, names).start()
        new_driver(env, spec)
        wait_for("the first loop", lambda: len(recorder.snapshot()) >= 1, timeout=60)
        leader = next(p for p in env.processes if p.identity == holder)
        leader.kill()
        other = next(p for p in env.processes if p.identity != holder)
        wait_for("the other replica leads", lambda: _holder(env) == other.identity, timeout=60)
        wait_for(
            "rollout complete", lambda: upgrade(env).get("phase") == "Idling" and _all_new(env, names), timeout=120
        )
        recorder.stop()
        loops = recorder.snapshot()
        assert recorder.max_in_flight <= 2, loops  # maxParallel, across the failover
        assert sorted(n for loop in loops for n in loop) == sorted(names)  # each node restarted once: nothing twice


def _all_new(env: Env, names: list[str]) -> bool:
    ds = env.ds("metax-driver") or {}
    rev = ((ds.get("spec") or {}).get("template") or {}).get("metadata", {}).get("annotations", {})
    want = rev.get("metax-tech.com/driver-revision")
    pods = [p for p in env.pods("driver") if not p["metadata"].get("deletionTimestamp")]
    got = {
        p["spec"]["nodeName"]: p["metadata"].get("annotations", {}).get("metax-tech.com/driver-revision") for p in pods
    }
    return set(got) == set(names) and set(got.values()) == {want}


def crash_loop(env: Env, pod: str) -> None:
    """What a kubelet reports for a crash-looping driver container (kwok leaves container statuses alone)."""
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    container = {"name": "driver", "ready": False, "restartCount": 5, "image": "x", "imageID": "", "state": waiting}
    status = {"conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [container]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NS}, "status": status}
    env.api.apply(body, field_manager="kubelet-test", force=True, subresource="status")
