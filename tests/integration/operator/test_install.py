"""The operator on the real control plane: install, edits, faults (C1, R-INSTALL, R-MERGE, R-DEP, R-VF).

Pods are created by the real DaemonSet controller, scheduled by the real scheduler and marked Running by
kwok; the operator is a local process with a kubeconfig. Aspects: install on GPU nodes only with Ready=True
and the printer columns; the §3.2.5 examples on the live DaemonSets; a prerequisite disabled and enabled;
a driver-config VF edit recreates one gpu-device pod; a deleted DaemonSet comes back; a hand edit of an owned
field is put back and a field we do not own is left alone; an API server restart mid-reconcile; a bad CR
gives Degraded with field paths; deleting the CR leaves nothing behind.
"""

from __future__ import annotations

import pytest
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core.cluster import workloads
from metax_core.node import uninstall

pytestmark = pytest.mark.integration

AGENTS = ("gpuLabel", "runtime", "driver", "maca", "gpuDevice", "vfioManager")


def _ready(env: Env) -> bool:
    c = env.condition("Ready")
    return c is not None and c["status"] == "True"


def test_install_converges_on_gpu_nodes_only_and_reports_ready(operator_env: Env) -> None:
    env = operator_env
    spec = cluster_operator()["spec"]
    spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    env.api.apply(cluster_operator(spec), field_manager="helm")
    env.start_operator()
    for component in AGENTS[1:]:
        wait_for(f"{component} on GPU nodes", lambda c=component: env.running_nodes(c) == set(env.gpu_nodes))
    assert env.running_nodes("gpuLabel") >= set(env.gpu_nodes)  # gpu-label runs everywhere to find GPUs
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    for name in env.daemonsets():
        tolerations = env.ds(name)["spec"]["template"]["spec"]["tolerations"]  # type: ignore[index]
        assert spec["tolerations"][0] in tolerations  # §3.2.4: the global tolerations on every component
    status = env.cr()["status"]
    assert status["observedGeneration"] == env.cr()["metadata"]["generation"]
    by_name = {c["name"]: c for c in status["components"]}
    assert by_name["gpuDevice"]["state"] == "Ready" and by_name["gpuDevice"]["desired"] == len(env.gpu_nodes)


def test_edits_reach_the_live_daemonsets(operator_env: Env) -> None:
    env = operator_env
    env.api.apply(cluster_operator(), field_manager="helm")
    env.start_operator()
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    spec = cluster_operator()["spec"]
    spec["maca"] = {"podTemplateSpec": {"spec": {"nodeSelector": {"zone": "a"}}}}
    spec["runtime"] = {"deploy": False}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("dependents of runtime pruned", lambda: "metax-gpu-device" not in env.daemonsets())
    assert "metax-maca" not in env.daemonsets() and "metax-gpu-label" in env.daemonsets()
    degraded = wait_for("Degraded", lambda: (c := env.condition("Degraded")) and c["status"] == "True" and c)
    assert "runtime" in degraded["message"]
    spec["runtime"] = {"deploy": True}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("maca back", lambda: env.ds("metax-maca") is not None)
    selector = env.ds("metax-maca")["spec"]["template"]["spec"]["nodeSelector"]  # type: ignore[index]
    assert selector == {workloads.GPU_NODE_LABEL: "true", "zone": "a"}  # R-MERGE: maps merge


@pytest.mark.restarts_apiserver
def test_faults_a_deleted_daemonset_a_hand_edit_and_an_apiserver_restart(operator_env: Env, control_plane) -> None:  # type: ignore[no-untyped-def]
    env = operator_env
    env.api.apply(cluster_operator(), field_manager="helm")
    env.start_operator()
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    env.api.delete("apps/v1", "DaemonSet", "metax-gpu-label", NS)
    wait_for("gpu-label back", lambda: env.ds("metax-gpu-label") is not None)
    env.api.merge_patch(
        "apps/v1",
        "DaemonSet",
        "metax-maca",
        {
            "metadata": {"labels": {"team": "gpu"}},
            "spec": {"template": {"spec": {"nodeSelector": {workloads.GPU_NODE_LABEL: "no"}}}},
        },
        namespace=NS,
    )
    wait_for(
        "owned field put back",
        lambda: env.ds("metax-maca")["spec"]["template"]["spec"]["nodeSelector"][workloads.GPU_NODE_LABEL] == "true",  # type: ignore[index]
    )
    assert env.ds("metax-maca")["metadata"]["labels"]["team"] == "gpu"  # type: ignore[index]  # not ours: left alone
    control_plane.restart_apiserver()
    env.api.delete("apps/v1", "DaemonSet", "metax-vfio-manager", NS)
    wait_for("vfio-manager back after the restart", lambda: env.ds("metax-vfio-manager") is not None)
    assert all(p.alive() for p in env.processes)
    control_plane.restart_controllers()  # the teardown's garbage collector and the next test see changes at once


def test_a_vf_edit_recreates_one_gpu_device_pod(operator_env: Env) -> None:
    env = operator_env
    env.api.apply(cluster_operator(), field_manager="helm")
    env.start_operator()
    wait_for("gpu-device running", lambda: env.running_nodes("gpuDevice") == set(env.gpu_nodes))
    wait_for(
        "VF counts recorded", lambda: len((env.cr().get("status") or {}).get("vfNums") or {}) == len(env.gpu_nodes)
    )

    def live() -> list[dict]:  # pods of an earlier test's DaemonSet may still be terminating
        return [p for p in env.pods("gpuDevice") if not p["metadata"].get("deletionTimestamp")]

    wait_for(
        "one gpu-device pod per GPU node",
        lambda: sorted(p["spec"]["nodeName"] for p in live()) == sorted(env.gpu_nodes),
    )
    before = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in live()}
    target, other = env.gpu_nodes[0], env.gpu_nodes[1]
    env.api.merge_patch(
        "v1",
        "ConfigMap",
        "driver-config",
        {"data": {"node-vfnums": f"nodes:\n  {target}:\n    vfnum: 4\n"}},
        namespace=NS,
    )
    # The operator's act is deleting that node's pod; the replacement comes from the real DaemonSet controller
    # (blind for up to a minute after an API server restart: the restart tests wait that out at their end).
    wait_for(
        "the edited node's gpu-device pod deleted", lambda: before[target] not in {p["metadata"]["uid"] for p in live()}
    )
    assert {p["metadata"]["uid"] for p in live() if p["spec"].get("nodeName") == other} == {before[other]}
    wait_for(
        "the DaemonSet controller's replacement on the edited node",
        lambda: any(p["spec"].get("nodeName") == target for p in live()),
        timeout=120,
    )
    assert {p["metadata"]["uid"] for p in live() if p["spec"].get("nodeName") == other} == {before[other]}


def test_a_bad_cluster_operator_is_degraded_with_field_paths_and_nothing_applied(operator_env: Env) -> None:
    env = operator_env
    bad = cluster_operator({"driver": {"payload": {}}, "vfioManager": {"vfioConfig": [{"nodeName": "(", "gpus": "0"}]}})
    env.api.apply(bad, field_manager="helm")
    env.start_operator()
    degraded = wait_for("Degraded", lambda: (c := env.condition("Degraded")) and c["reason"] == "InvalidSpec" and c)
    assert (
        "driver.payload.version" in degraded["message"] and "vfioManager.vfioConfig[0].nodeName" in degraded["message"]
    )
    assert env.daemonsets() == set()


def test_deleting_the_cluster_operator_leaves_nothing_behind(operator_env: Env) -> None:
    env = operator_env
    env.api.apply(cluster_operator(), field_manager="helm")
    env.start_operator(METAX_UNINSTALL_TIMEOUT="5")  # long enough to look at what is kept while it waits
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    env.api.merge_patch(
        "v1", "Node", env.gpu_nodes[0], {"metadata": {"labels": {"metax-tech.com/gpu.product": "C500"}}}
    )
    env.api.delete("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    # kwok's agent pods never answer: the finalizer asks, waits its bounded 5 s, says which nodes, goes on
    asked = wait_for("the uninstall request on the GPU nodes", lambda: _requested(env))
    assert asked == sorted(env.gpu_nodes)
    assert "metax-driver" in env.daemonsets()  # nothing the agents read is deleted while they may answer
    wait_for("daemonsets gone", lambda: env.daemonsets() == set())
    wait_for("the CR gone", lambda: env.condition("Ready") is None and not _exists(env))
    events = [
        e
        for e in env.api.list("events.k8s.io/v1", "Event", namespace="default").items
        if e.get("reason") == uninstall.INCOMPLETE_REASON
    ]
    assert events and all(n in events[-1]["note"] for n in env.gpu_nodes)
    for name in env.gpu_nodes:
        metadata = env.api.get("v1", "Node", name)["metadata"]
        keys = [*(metadata.get("labels") or {}), *(metadata.get("annotations") or {})]
        assert not [k for k in keys if k.startswith("metax-tech.com/")]


def _requested(env: Env) -> list[str]:
    return sorted(
        n
        for n in env.gpu_nodes
        if uninstall.requested(env.api.get("v1", "Node", n)["metadata"].get("annotations") or {})
    )


def _exists(env: Env) -> bool:
    try:
        env.cr()
    except Exception:
        return False
    return True
