"""A driver that fails to load stops the rollout at the canary (issue 20 item 2; R-ROLLOUT, R-DRIVER, R-READY).

On the real control plane, the real operator drives a rollout (``enableRollout``, a canary step of one node,
``maxParallel`` 1) from driver payload 2.20.0 to 2.21.0, whose module is built for another kernel: driver-manager
finds no module for the node's kernel by its vermagic, keeps the running driver and is not ready
(``KernelNotCovered``; docs/agents.md). Each GPU node is a process node
(docs/processnode.md, "Stand-ins for a GPU node") with its own fake GPU host: for every driver pod the
operator's DaemonSet creates, the node runs the rendered pod (its env, METAX_DRIVER_VERSION included, its
payload init container copying the payload image's files) with a real driver-manager against that fake host,
and the rendered exec readinessProbe (``test -f $METAX_PROBE_FILE``) decides the pod's Ready. No kwok crash
stage, nothing of the operator or driver-manager replaced.

Asserted, for fallback ``pause`` and for ``onCanaryFailure: rollback`` (issue 41), with the operator's default
600 s ready timeout: the canary's new pod runs, is not Ready and is counted failed within 15 s of
driver-manager's verdict on its node (fail fast; Failed True naming the canary: ``StepFailed``, or
``CanaryFailed``); then pause: phase Progressing, Progressing False ``FallbackPaused``, a confirmation awaited;
rollback: no retry round although maxFailureThreshold allows three, Succeed False ``RolledBack``, phase Idling,
the DaemonSet back on ``lastAppliedSpec`` and the canary's pod on it Ready within 120 s of the failed pod's
start; no second batch (no other node's driver pod is ever deleted); the canary's fake host is back on 2.20.0
with its module parameter and VF counts, read from its /sys, never left driverless.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import CR_API, NS, Env, cluster_operator, wait_for
from rollout_helpers import DeletionRecorder

from metax_core import components
from metax_core.cluster import payloads, workloads
from metax_core.errors import ClusterError
from metax_core.node import driver_config
from metax_core.wire import driver_verdict, event_reasons
from metax_dev import agents
from metax_dev.controlplane import cluster as controlplane
from metax_dev.processnode import node as processnode
from metax_dev.processnode import standins
from metax_hw import hostfiles
from metax_hw_fake import builder

pytestmark = pytest.mark.integration

REGISTRY = "registry.example.com/metax"
GOOD = agents.PAYLOAD_VERSION  # 2.20.0, what the install loads (the hosts boot with 2.18.0)
BROKEN = "2.21.0"  # built for another kernel: refused
PAGE_SIZE = "16"  # module-params xcore_page_size (the module's default is 10)
VFNUM = 2
GPUS = 2
NODES = 2
DRIVER_SIGNAL = components.BY_COMPONENT[components.Component.DRIVER].signal
READY_TIMEOUT = 600
"""The operator's default METAX_DRIVER_READY_TIMEOUT: longer than any wait here, so no failure is the timeout's."""
VERDICT_SEEN_WITHIN = 15.0
"""Seconds from driver-manager's verdict to the operator counting the canary failed (issue 41 item 1)."""
ROLLED_BACK_WITHIN = 120.0
"""Seconds from the failed canary pod's start to the canary Ready on its old driver (issue 41 item 2)."""


def payload_image(version: str) -> str:
    return payloads.payload_reference(f"driver-image:{version}", None, REGISTRY)


class GpuNode:
    """One GPU node: a fake host (2 GPUs, host driver 2.18.0 loaded) and the process node standing for it."""

    def __init__(self, plane: controlplane.ControlPlane, name: str, workdir: Path) -> None:
        self.name = name
        self.fake = builder.FakeHostBuilder().gpus(GPUS).host_driver("2.18.0").build(workdir / "host")
        stand_ins = standins.StandIns(
            host_root=self.fake.root,
            # The product image's entrypoint is `metax-driver-manager`; on a fake host the same agent runs with
            # the fake kernel's write primitive (metax_dev.agents).
            entrypoints={"metax-driver": (sys.executable, "-m", "metax_dev.agents", "driver-manager")},
            payloads={
                payload_image(GOOD): agents.write_payload(workdir / "payload-good", GOOD),
                payload_image(BROKEN): agents.write_payload(
                    workdir / "payload-broken", BROKEN, built_for=agents.BROKEN_KERNEL
                ),
            },
            tool_dirs=(self.fake.bin_dir,),
        )
        self.node = processnode.ProcessNode.for_control_plane(
            plane, workdir / "node", name=name, labels={workloads.GPU_NODE_LABEL: "true"}, stand_ins=stand_ins
        )

    def sys(self, *parts: str) -> str | None:
        path = self.fake.root.joinpath("sys", *parts)
        return path.read_text().strip() if path.exists() else None

    def driver_signal(self) -> str | None:
        """The reason driver-manager last published on the node's readiness board (the end of its round)."""
        found = hostfiles.FileReadinessBoard(self.fake.root).read_all().get(DRIVER_SIGNAL)
        return None if found is None else found.reason

    def driver(self) -> dict[str, Any]:
        """What the node's /sys says: the metax module's version and xcore_page_size, each GPU's sriov_numvfs."""
        return {
            "version": self.sys("module", "metax", "version"),
            "xcore_page_size": self.sys("module", "metax", "parameters", "xcore_page_size"),
            "numvfs": [self.sys("bus", "pci", "devices", a, "sriov_numvfs") for a in self.fake.gpu_addresses()],
        }


def expected(version: str) -> dict[str, Any]:
    return {"version": version, "xcore_page_size": PAGE_SIZE, "numvfs": [str(VFNUM)] * GPUS}


@pytest.fixture(autouse=True)
def _diagnose_failures(operator_env: Env, request: pytest.FixtureRequest) -> Iterator[None]:
    """On a failure, print the CR's status and the operator's log (the process nodes keep a log per pod)."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        with contextlib.suppress(ClusterError):
            print("status:", json.dumps(operator_env.cr().get("status"), indent=1)[-6000:])
        for p in operator_env.processes:
            print(f"--- operator {p.identity}\n{p.log()}")


@pytest.fixture
def gpu_nodes(control_plane: controlplane.ControlPlane, operator_env: Env, tmp_path: Path) -> Iterator[list[GpuNode]]:
    """The process GPU nodes run the driver pods. The session's kwok nodes keep their ``gpu.installed``
    label but the driver DaemonSet does not place pods on them (their taint is not tolerated): the rollout
    leaves them out by the DaemonSet controller's own count (`metax_core.rollout.fleet.places_no_other_node`)
    instead of waiting for them forever."""
    tag = uuid.uuid4().hex[:6]
    nodes = [GpuNode(control_plane, f"pgpu-{tag}-{i}", tmp_path / f"gpu-{i}") for i in range(NODES)]
    saved, operator_env.gpu_nodes = operator_env.gpu_nodes, [n.name for n in nodes]
    try:
        for n in nodes:
            n.node.start()
        for n in nodes:
            n.node.wait_ready()
        yield nodes
    finally:
        # Uninstall while the nodes still run, so they finish their pods' deletions (no kubelet-less pods left
        # Terminating on a deleted node for the next tests of the session); then stop them.
        with contextlib.suppress(ClusterError):
            operator_env.api.delete(CR_API, "ClusterOperator", "cluster-operator")
        with contextlib.suppress(AssertionError):
            wait_for("the driver pods gone", lambda: not driver_pods(operator_env, nodes), timeout=60)
        operator_env.gpu_nodes = saved
        for n in nodes:
            n.node.stop()


def driver_spec(policy: dict[str, Any], version: str) -> dict[str, Any]:
    return {
        "registry": REGISTRY,
        "driver": {
            "deployPolicy": "PreferCloud",
            "payload": {"version": version},
            # Process nodes are tainted and labelled (docs/processnode.md): the driver asks for them (R-MERGE).
            "podTemplateSpec": {
                "spec": {
                    "nodeSelector": {processnode.LABEL: processnode.LABEL_VALUE},
                    "tolerations": [{"key": processnode.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                }
            },
            "upgradePolicy": policy,
        },
    }


def upgrade(env: Env) -> dict[str, Any]:
    return dict((env.cr().get("status") or {}).get("upgradeStatus") or {})


def condition(env: Env, kind: str) -> dict[str, Any] | None:
    return next((c for c in upgrade(env).get("conditions", []) if c["type"] == kind), None)


def driver_pods(env: Env, nodes: list[GpuNode]) -> dict[str, dict[str, Any]]:
    """node → its driver pod not being deleted."""
    names = {n.name for n in nodes}
    return {
        p["spec"]["nodeName"]: p
        for p in env.pods("driver")
        if p["spec"].get("nodeName") in names and not p["metadata"].get("deletionTimestamp")
    }


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def install(env: Env, nodes: list[GpuNode], policy: dict[str, Any]) -> dict[str, str]:
    """driver-config (VFs, a module parameter), the CR on GOOD, the operator with the default ready timeout (600 s:
    a failure seen sooner is driver-manager's verdict); every node Ready on GOOD. Returns node → its driver pod's
    uid."""
    config = driver_config.DriverConfig(
        node_vfnums={n.name: VFNUM for n in nodes}, module_params={"xcore_page_size": PAGE_SIZE}
    )
    with contextlib.suppress(ClusterError):
        env.api.delete("v1", "ConfigMap", workloads.DRIVER_CONFIG_MAP, NS)
    env.api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": workloads.DRIVER_CONFIG_MAP, "namespace": NS},
            "data": driver_config.render(config),
        }
    )
    env.api.apply(cluster_operator(driver_spec(policy, GOOD)), field_manager="helm")
    env.start_operator(METAX_DRIVER_READY_TIMEOUT=str(READY_TIMEOUT))
    wait_for(
        "every GPU node's driver pod Ready (its real probe) on the payload driver",
        lambda: len(pods := driver_pods(env, nodes)) == NODES and all(ready(p) for p in pods.values()),
        timeout=180,
    )
    for n in nodes:
        assert n.driver() == expected(GOOD), n.name
    wait_for("no rollout", lambda: upgrade(env).get("phase") == "Idling" and seen_latest(env), timeout=60)
    return {name: p["metadata"]["uid"] for name, p in driver_pods(env, nodes).items()}


def seen_latest(env: Env) -> bool:
    cr = env.cr()
    return (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]


def rendered_version(template: dict[str, Any]) -> tuple[str, str]:
    """The payload image and METAX_DRIVER_VERSION of a driver pod template."""
    spec = template["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    return spec["initContainers"][0]["image"], str(env.get("METAX_DRIVER_VERSION"))


def events(env: Env, reason: str, node: str) -> list[str]:
    return [
        str(e.get("note", ""))
        for e in env.api.list("events.k8s.io/v1", "Event").items
        if e.get("reason") == reason and node in json.dumps(e.get("regarding") or {}) + str(e.get("note", ""))
    ]


def seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def node_verdict(env: Env, node: str) -> driver_verdict.Verdict:
    """driver-manager's verdict on ``node``, as it wrote it."""
    text = (env.api.get("v1", "Node", node)["metadata"].get("annotations") or {}).get(driver_verdict.ANNOTATION)
    assert text, f"no {driver_verdict.ANNOTATION} on {node}"
    return driver_verdict.decode(text)


def break_the_driver(env: Env, nodes: list[GpuNode], policy: dict[str, Any]) -> tuple[DeletionRecorder, str]:
    """Apply the CR on BROKEN; the canary is the first (and only) node whose driver pod the operator deletes."""
    recorder = DeletionRecorder(env.api, [n.name for n in nodes]).start()
    env.api.apply(cluster_operator(driver_spec(policy, BROKEN)), field_manager="helm")
    loops = wait_for("the canary's driver pod deleted", recorder.snapshot, timeout=60)
    assert len(loops[0]) == 1, loops
    return recorder, loops[0][0]


def test_a_driver_the_kernel_refuses_pauses_the_rollout_at_the_canary(
    operator_env: Env, gpu_nodes: list[GpuNode]
) -> None:
    env, nodes = operator_env, gpu_nodes
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
        "maxParallel": 1,
        "fallback": "pause",
    }
    before = install(env, nodes, policy)
    recorder, canary = break_the_driver(env, nodes, policy)
    by_name = {n.name: n for n in nodes}

    failed = wait_for(
        "the canary counted failed (fallback pause)",
        lambda: (c := condition(env, "Failed")) is not None and c["status"] == "True" and c,
        timeout=120,
    )
    assert failed["reason"] == "StepFailed" and canary in failed["message"], failed
    verdict = node_verdict(env, canary)
    assert verdict.cause is driver_verdict.Cause.KERNEL_NOT_COVERED and verdict.version == BROKEN
    assert seconds(failed["lastTransitionTime"]) - verdict.at.timestamp() <= VERDICT_SEEN_WITHIN
    status = upgrade(env)
    assert status["phase"] == "Progressing", status
    progressing = condition(env, "Progressing") or {}
    assert (progressing.get("status"), progressing.get("reason")) == ("False", "FallbackPaused"), progressing
    assert (status.get("status") or {}).get("confirmToken"), status  # the fallback waits for an administrator

    pods = driver_pods(env, nodes)
    new = pods[canary]
    assert new["metadata"]["uid"] != before[canary]
    assert verdict.pod == new["metadata"]["name"]  # the verdict names its pod (the container's HOSTNAME)
    assert new["status"]["phase"] == "Running" and not ready(new), new["status"]  # its real probe says no
    assert rendered_version({"spec": new["spec"]}) == (payload_image(BROKEN), BROKEN)
    # The round that found the new payload built for another kernel kept the running driver, then published:
    wait_for(
        "driver-manager's round on the canary ended with the refused payload",
        lambda: "no module for the running kernel" in (by_name[canary].driver_signal() or ""),
        timeout=60,
    )
    assert agents.BROKEN_KERNEL in (by_name[canary].driver_signal() or "")
    assert by_name[canary].driver() == expected(GOOD)  # never unloaded for a module it cannot load
    assert events(env, event_reasons.KERNEL_NOT_COVERED, canary), "driver-manager says the kernel is not covered"

    others = [n for n in nodes if n.name != canary]
    for n in others:
        assert pods[n.name]["metadata"]["uid"] == before[n.name] and ready(pods[n.name])  # no second batch
        assert n.driver() == expected(GOOD)
    recorder.stop()
    assert recorder.snapshot() == [[canary]]


def test_a_driver_the_kernel_refuses_is_rolled_back_from_the_canary_at_once(
    operator_env: Env, gpu_nodes: list[GpuNode]
) -> None:
    """onCanaryFailure: rollback (issue 41 item 2): no retry although maxFailureThreshold allows three, no
    fallback pause; the canary back on its old driver within `ROLLED_BACK_WITHIN` of its failed pod's start."""
    env, nodes = operator_env, gpu_nodes
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
        "maxParallel": 1,
        "maxFailureThreshold": 3,
        "fallback": "pause",
        "onCanaryFailure": "rollback",
    }
    before = install(env, nodes, policy)
    old_template = (env.ds("metax-driver") or {})["spec"]["template"]
    recorder, canary = break_the_driver(env, nodes, policy)
    by_name = {n.name: n for n in nodes}
    failed_pod = wait_for(
        "the canary's new pod started",
        lambda: (
            (p := driver_pods(env, nodes).get(canary)) is not None
            and p["metadata"]["uid"] != before[canary]
            and (p.get("status") or {}).get("startTime")
            and p
        ),
        timeout=60,
    )
    failed_started = seconds(failed_pod["status"]["startTime"])

    def rolled_back() -> bool:
        succeed = condition(env, "Succeed") or {}
        return (succeed.get("status"), succeed.get("reason")) == ("False", "RolledBack")

    wait_for("the canary rolled back", rolled_back, timeout=180)
    status = upgrade(env)
    assert status["phase"] == "Idling", status
    failed = condition(env, "Failed") or {}
    assert failed.get("status") == "True" and failed.get("reason") == "CanaryFailed" and canary in failed["message"]
    assert (condition(env, "Terminating") or {}).get("reason") == "RollbackComplete"
    assert int((status.get("status") or {}).get("currentFailureRetry") or 0) == 0  # no retry round
    last_applied = json.loads(status["lastAppliedSpec"])
    template = (env.ds("metax-driver") or {})["spec"]["template"]
    assert rendered_version(template) == rendered_version(last_applied) == (payload_image(GOOD), GOOD)
    assert template["metadata"] == old_template["metadata"]
    back = wait_for(
        "the canary's pod on the old template Ready again (its real probe)",
        lambda: (
            (p := driver_pods(env, nodes).get(canary)) is not None
            and rendered_version({"spec": p["spec"]}) == (payload_image(GOOD), GOOD)
            and ready(p)
            and p
        ),
        timeout=120,
    )
    ready_at = next(c for c in back["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
    assert seconds(ready_at) - failed_started <= ROLLED_BACK_WITHIN
    assert by_name[canary].driver() == expected(GOOD)

    pods = driver_pods(env, nodes)
    for n in nodes:
        if n.name != canary:
            assert pods[n.name]["metadata"]["uid"] == before[n.name] and ready(pods[n.name])  # no second batch
            assert n.driver() == expected(GOOD)
    upgraded_and_rolled_back = wait_for(
        "the recorder saw the canary's two deletions",
        lambda: (seen := [node for loop in recorder.snapshot() for node in loop]) and len(seen) >= 2 and seen,
        timeout=30,
    )
    recorder.stop()
    assert upgraded_and_rolled_back == [canary, canary]
