"""The operator as a local process against the test control plane, as a controller runs in envtest."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metax_core.cluster import workloads
from metax_core.errors import ClusterError
from metax_dev.operatorprocess import OperatorProcess
from metax_k8s import client
from tests.waiting import wait_for

NS = "metax-operator"
CR_API = "gpu.metax-tech.com/v1alpha1"
OPERATOR = "metax-operator"


def cluster_operator(spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = (
        dict(spec)
        if spec is not None
        else {
            "registry": "registry.example.com/metax",
            "driver": {"payload": {"version": "2.14.6"}},
        }
    )
    return {"apiVersion": CR_API, "kind": "ClusterOperator", "metadata": {"name": "cluster-operator"}, "spec": body}


class Env:
    """What one test needs: the API, GPU node names, the operator processes, and helpers to read state."""

    def __init__(
        self, api: client.HttpApi, gpu_nodes: list[str], other_nodes: list[str], log_dir: Path, kubeconfig: Path
    ):
        self.api = api
        self.gpu_nodes = gpu_nodes
        self.other_nodes = other_nodes
        self.log_dir = log_dir
        self.kubeconfig = kubeconfig
        self.processes: list[OperatorProcess] = []

    def start_operator(self, identity: str = "op-a", **env: str) -> OperatorProcess:
        test_env = {
            "METAX_DRIVER_READY_TIMEOUT": "20",
            # kwok runs the agents' pods without the agents: nothing answers the uninstall request, so the
            # finalizer's bounded wait (R-INSTALL) is what these tests see; 5 s instead of the default 180 s.
            "METAX_UNINSTALL_TIMEOUT": "5",
            **env,
        }
        p = OperatorProcess(self.kubeconfig, identity, self.log_dir, test_env, namespace=NS)
        self.processes.append(p)
        return p

    def cr(self) -> dict[str, Any]:
        return self.api.get(CR_API, "ClusterOperator", "cluster-operator")

    def condition(self, kind: str) -> dict[str, Any] | None:
        try:
            conditions = (self.cr().get("status") or {}).get("conditions") or []
        except ClusterError:
            return None
        return next((dict(c) for c in conditions if c["type"] == kind), None)

    def ds(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get("apps/v1", "DaemonSet", name, NS)
        except ClusterError:
            return None

    def daemonsets(self) -> set[str]:
        return {o["metadata"]["name"] for o in self.api.list("apps/v1", "DaemonSet", namespace=NS).items}

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"{workloads.COMPONENT_LABEL}={component}"
        return list(self.api.list("v1", "Pod", namespace=NS, label_selector=selector).items)

    def running_nodes(self, component: str) -> set[str]:
        """Nodes with a Running pod of ``component`` (pods left on nodes another test deleted are not counted)."""
        return {
            p["spec"].get("nodeName")
            for p in self.pods(component)
            if p["spec"].get("nodeName") in self.gpu_nodes + self.other_nodes
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        }

    def label_gpu_nodes(self, names: list[str]) -> None:
        for name in names:
            self.api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: "true"}}})


def wait_daemonset_controller(env: Env, timeout: float = 180.0) -> float:
    """After an API server restart, wait until the real DaemonSet controller replaces a deleted pod again.

    kube-controller-manager's informers are blind for a while after a restart (their watches get 403 until the
    API server's RBAC caches are back, then client-go's reflector backs off: 0.8 s doubling to 30 s, with
    jitter, not reset for 2 minutes), and its DaemonSet syncs fail meanwhile ("read version ... is not as new
    as written version", StaleControllerConsistencyDaemonSet) with rate-limited requeues. Measured on this
    control plane with a plain DaemonSet: a deleted pod came back in 0.01 s before any restart, 1.7 s, 10.8 s
    and 50.5 s right after three restarts in 40 s. A test that restarts the API server calls this at its end,
    so the next test does not inherit the blind controller. Returns the seconds it took.
    """
    began = time.monotonic()
    nodes = set(env.gpu_nodes + env.other_nodes)
    pods = [
        p
        for p in env.pods("gpuLabel")
        if p["spec"].get("nodeName") in nodes and not p["metadata"].get("deletionTimestamp")
    ]
    if not pods:
        return 0.0
    victim = pods[0]
    node, uid = victim["spec"].get("nodeName"), victim["metadata"]["uid"]
    env.api.delete("v1", "Pod", victim["metadata"]["name"], NS)
    wait_for(
        "the DaemonSet controller replacing a deleted pod",
        lambda: any(
            p["spec"].get("nodeName") == node
            and p["metadata"]["uid"] != uid
            and not p["metadata"].get("deletionTimestamp")
            for p in env.pods("gpuLabel")
        ),
        timeout=timeout,
        interval=0.5,
    )
    return time.monotonic() - began
