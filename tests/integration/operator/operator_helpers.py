"""The operator as a local process against the test control plane, as a controller runs in envtest."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metax_core.cluster import workloads
from metax_core.errors import ClusterError
from metax_dev.operatorprocess import OperatorProcess
from metax_k8s import client
from tests.waiting import wait_for as wait_for  # the operator tests import it from here

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
            # finalizer's bounded wait (R-INSTALL) is what these tests see, in every teardown: 2 s instead of the
            # default 180 s (a test that looks inside the wait sets its own).
            "METAX_UNINSTALL_TIMEOUT": "2",
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
