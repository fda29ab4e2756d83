"""Fixtures for the operator on the real control plane: CRD, namespace, GPU nodes, cleanup.

``operator_env`` labels two of the session's kwok nodes as GPU nodes (the third stays a CPU node), yields an
`operator_helpers.Env`, and afterwards deletes ``cluster-operator`` (the running operator's finalizer removes
what it created), stops every operator process it started and removes what is left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException
from operator_helpers import CR_API, NS, Env, OperatorProcess, wait_for

from metax_core.cluster import workloads
from metax_core.errors import ClusterError, Conflict
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client, crd
from tests.support.cluster import wait_served


@pytest.fixture(scope="session")
def operator_api(control_plane: controlplane.ControlPlane) -> client.HttpApi:
    api = client.HttpApi(client.api_client(control_plane.kubeconfig_path), user_agent="operator-tests")
    api.apply(crd.crd(), field_manager="operator-tests", force=True)
    wait_served(api, CR_API, "ClusterOperator")
    with contextlib.suppress(Conflict):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


def _delete_cluster_operator(env: Env, plane: controlplane.ControlPlane) -> None:
    with contextlib.suppress(ClusterError):
        env.api.delete(CR_API, "ClusterOperator", "cluster-operator")
    if any(p.alive() for p in env.processes):
        with contextlib.suppress(AssertionError):
            wait_for("cluster-operator gone", lambda: not _exists(env), timeout=60)
    if _exists(env):  # no operator left to finalize it: drop the finalizer by hand
        with contextlib.suppress(ClusterError):
            env.api.merge_patch(CR_API, "ClusterOperator", "cluster-operator", {"metadata": {"finalizers": None}})
    for kind in ("DaemonSet", "Deployment"):
        for obj in env.api.list("apps/v1", kind, namespace=NS).items:
            with contextlib.suppress(ClusterError):
                env.api.delete("apps/v1", kind, obj["metadata"]["name"], NS)
    for obj in env.api.list("v1", "ConfigMap", namespace=NS).items:
        if obj["metadata"]["name"] != "kube-root-ca.crt":
            with contextlib.suppress(ClusterError):
                env.api.delete("v1", "ConfigMap", obj["metadata"]["name"], NS)
    _collect_orphaned_pods(env, plane)


def _collect_orphaned_pods(env: Env, plane: controlplane.ControlPlane) -> None:
    """Delete the deleted DaemonSets' pods at once (grace 0), as the garbage collector would.

    The collector can be late for reasons of the control plane, not of the operator: after kube-apiserver restarts
    (client-go's back-off, docs/controlplane.md), and for 30 s after a CRD a test created is deleted (its resync
    waits for the vanished kind's informer). Pods on kwok nodes a test has deleted are never finished by kwok at
    all. The next tests of the session share the namespace and check that nothing of ours remains, so the
    harness removes them itself instead of waiting.
    """
    orphans = _orphans(env)
    if not orphans:
        return
    with plane.api_client() as admin:
        core = kube_client.CoreV1Api(admin)
        for name in orphans:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def _orphans(env: Env) -> list[str]:
    owners = {obj["metadata"]["uid"] for obj in env.api.list("apps/v1", "DaemonSet", namespace=NS).items}
    return [
        pod["metadata"]["name"]
        for pod in env.api.list("v1", "Pod", namespace=NS).items
        if any(
            ref["kind"] == "DaemonSet" and ref["uid"] not in owners
            for ref in pod["metadata"].get("ownerReferences") or []
        )
    ]


def _exists(env: Env) -> bool:
    try:
        env.cr()
    except ClusterError:
        return False
    return True


@pytest.fixture
def operator_env(
    control_plane: controlplane.ControlPlane, operator_api: client.HttpApi, tmp_path: Path
) -> Iterator[Env]:
    names = sorted(control_plane.node_names)[:3]
    env = Env(operator_api, names[:2], names[2:], tmp_path, control_plane.kubeconfig_path)
    env.label_gpu_nodes(env.gpu_nodes)
    try:
        yield env
    finally:
        _delete_cluster_operator(env, control_plane)
        for p in env.processes:
            p.stop()
        for name in control_plane.node_names:
            with contextlib.suppress(ClusterError):
                operator_api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: None}}})


def dump_logs(processes: list[OperatorProcess]) -> str:
    return "\n".join(f"--- {p.identity}\n{p.log()}" for p in processes)
