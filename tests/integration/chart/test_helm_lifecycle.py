"""The README's `helm install`, with the operator really running, end to end (R-INSTALL, R-WEBHOOK, R-SECURITY).

The operator Deployment's pod lands on the session's process node (tests/support/control_plane.py
``process_node``; docs/processnode.md) and runs ``metax-operator-controller`` as a local process with its own
ServiceAccount token; the DaemonSets it creates run on kwok GPU nodes (kwok makes their pods Ready). The only
values added to the README's install command are the ones that place the pod: ``operator.nodeSelector`` and
``operator.tolerations`` (the process node's label and taint) and ``operator.webhook.port`` (a process node
has one port space shared with everything else on the machine: 9443 may be taken).

Covers, in order: ``helm install ... --wait`` returns once the operator pod's real readiness probe passed
(Deployment Available); the pod's token is its ServiceAccount's (TokenReview) and its process has no other
credentials; ``cluster-operator`` becomes Ready=True and ``kubectl get clusteroperator`` (the kubectl built with
the control plane) shows it; bad specs applied with kubectl are refused by the API server through the webhook
that the operator pod serves behind the chart's own Service (no ``operator.webhook.url``), with field paths in
kubectl's output; ``helm upgrade --set ...`` reaches the CR and the DaemonSets; ``helm uninstall --wait`` runs
the pre-delete Job for real (``metax-operator uninstall`` under the operator's ServiceAccount), and afterwards
nothing of ours remains: chart objects, labelled objects, pods, node labels.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from metax_core.cluster import workloads
from metax_core.errors import ClusterError
from metax_dev.controlplane import build, cluster, network
from metax_dev.processnode import node as processnode
from metax_k8s import client
from tests.support.chart import (
    CHART_DIR,
    CHART_OBJECTS,
    NAMESPACE,
    RELEASE,
    Helm,
    install_command,
    labelled_ours,
    present,
    uninstall_command,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

CR_API = "gpu.metax-tech.com/v1alpha1"
RBAC = "rbac.authorization.k8s.io/v1"
VERSION = "2.18.0"
DENIED = 'admission webhook "clusteroperators.gpu.metax-tech.com" denied the request'
_TIMES: dict[str, float] = {}


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary = str(build.build(quiet=True).binary("kubectl"))
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=60, check=False
        )


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(control_plane.kubeconfig_path))


@pytest.fixture(scope="module")
def gpu_nodes(control_plane: cluster.ControlPlane, api: client.HttpApi) -> Iterator[list[str]]:
    names = sorted(control_plane.node_names)[:2]
    for name in names:  # what the real gpu-label agent would find on a MetaX host
        api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: "true"}}})
    yield names
    for name in control_plane.node_names:
        with contextlib.suppress(ClusterError):
            api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: None}}})


@pytest.fixture(scope="module")
def release(
    control_plane: cluster.ControlPlane,
    api: client.HttpApi,
    process_node: processnode.ProcessNode,
    gpu_nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Helm]:
    helm = Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm"))
    assert present(api, CHART_OBJECTS) == []
    placement = [
        "--set-json",
        "operator.nodeSelector=" + json.dumps({processnode.LABEL: processnode.LABEL_VALUE}),
        "--set-json",
        "operator.tolerations="
        + json.dumps([{"key": processnode.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]),
        "--set",
        f"operator.webhook.port={network.free_port()}",
        # kwok runs the agents' pods but no agent answers the uninstall: the finalizer's bounded wait (R-INSTALL)
        # is all that happens on these nodes, so keep it short (the chart's value reaches the operator's env)
        "--set",
        "operator.uninstallTimeoutSeconds=10",
    ]
    try:
        _TIMES["install"] = time.monotonic()
        helm.run(*install_command("r.example/metax", VERSION), *placement)
        _TIMES["installed"] = time.monotonic()
        yield helm
    finally:
        if RELEASE in helm.run("list", "-n", NAMESPACE, "-q").stdout:
            helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
            with contextlib.suppress(ClusterError):  # an operator that never ran cannot finalize it
                api.merge_patch(CR_API, "ClusterOperator", "cluster-operator", {"metadata": {"finalizers": None}})


def _operator_pod(api: client.HttpApi) -> dict[str, Any]:
    pods = api.list("v1", "Pod", namespace=NAMESPACE, label_selector="app.kubernetes.io/name=metax-operator").items
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and "job-name" not in p["metadata"]["labels"]]
    assert len(live) == 1, [p["metadata"]["name"] for p in live]
    return live[0]


def _ready(obj: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or []
    )


def test_install_runs_the_operator_pod_as_a_process_with_its_own_token(
    release: Helm, api: client.HttpApi, process_node: processnode.ProcessNode
) -> None:
    deployment = api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE)
    assert deployment["status"]["availableReplicas"] == 1  # helm install --wait: the real readiness probe passed
    pod = _operator_pod(api)
    assert pod["spec"]["nodeName"] == process_node.name and _ready(pod)
    assert pod["status"]["podIP"] == process_node.address
    worker = process_node.worker(NAMESPACE, pod["metadata"]["name"])
    assert worker is not None
    token = (worker.account_dir / "token").read_text()
    review = api.create(
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {"name": "operator-token"},
            "spec": {"token": token},
        }
    )
    user = review["status"]["user"]
    assert review["status"]["authenticated"] is True
    assert user["username"] == f"system:serviceaccount:{NAMESPACE}:metax-operator"
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod["metadata"]["name"]]
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in environ if e.startswith(b"KUBECONFIG=")]  # the token is its only credential
    assert f"METAX_SERVICEACCOUNT_DIR={worker.account_dir}".encode() in environ


def test_cluster_operator_becomes_ready_and_kubectl_shows_it(
    release: Helm,
    api: client.HttpApi,
    control_plane: cluster.ControlPlane,
    gpu_nodes: list[str],
    record_timing: Callable[[str, float], None],
) -> None:
    wait_for(
        "cluster-operator Ready=True",
        lambda: _ready(api.get(CR_API, "ClusterOperator", "cluster-operator")),
        timeout=180,
    )
    record_timing(
        "e2e: helm install --wait (operator pod Ready on the process node)", _TIMES["installed"] - _TIMES["install"]
    )
    record_timing("e2e: helm install to cluster-operator Ready=True", time.monotonic() - _TIMES["install"])
    daemonsets = {d["metadata"]["name"] for d in api.list("apps/v1", "DaemonSet", namespace=NAMESPACE).items}
    assert {"metax-gpu-label", "metax-driver", "metax-gpu-device"} <= daemonsets
    gpu_device = api.get("apps/v1", "DaemonSet", "metax-gpu-device", NAMESPACE)
    assert gpu_device["status"]["numberReady"] == len(gpu_nodes)
    shown = Kubectl(control_plane.kubeconfig_path).run("get", "clusteroperator")
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[:2] == ["NAME", "READY"] and row.split()[:2] == ["cluster-operator", "True"]


def test_bad_specs_are_refused_through_the_webhook_behind_the_charts_service(
    release: Helm, api: client.HttpApi, control_plane: cluster.ControlPlane
) -> None:
    config = api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook")
    for hook in config["webhooks"]:
        assert "url" not in hook["clientConfig"] and hook["clientConfig"]["service"]["name"] == "metax-operator-webhook"
        assert hook["clientConfig"]["caBundle"]  # the operator pod made its CA and patched it in
    kubectl = Kubectl(control_plane.kubeconfig_path)
    missing = kubectl.run(
        "patch",
        "clusteroperator",
        "cluster-operator",
        "--type=merge",
        "-p",
        '{"spec":{"driver":{"payload":{"version":null}}}}',
    )
    # kubectl prints the Status causes (one "path: message" per field); the Status message names the webhook.
    assert missing.returncode != 0
    assert "The request is invalid: spec.driver.payload.version: is required" in missing.stderr
    with pytest.raises(ClusterError, match=f"(?s){DENIED}.*spec.driver.payload.version: is required"):
        api.merge_patch(
            CR_API, "ClusterOperator", "cluster-operator", {"spec": {"driver": {"payload": {"version": None}}}}
        )
    steps = {
        "apiVersion": CR_API,
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
        "spec": {
            "driver": {
                "upgradePolicy": {"upgradeSteps": [{"replicas": 3}, {"replicas": 2}, {"replicas": "100%"}]},
            }
        },
    }
    decreasing = kubectl.run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(steps))
    assert decreasing.returncode != 0
    assert "spec.driver.upgradePolicy.upgradeSteps[1].replicas" in decreasing.stderr
    with pytest.raises(ClusterError, match=f"(?s){DENIED}.*upgradeSteps\\[1\\].replicas"):
        api.apply(steps, field_manager="admin", force=True)
    stored = api.get(CR_API, "ClusterOperator", "cluster-operator")["spec"]
    assert stored["driver"]["payload"]["version"] == VERSION and not stored["driver"]["upgradePolicy"]["upgradeSteps"]


def _env(daemonset: dict[str, Any], name: str) -> str | None:
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    return next((e.get("value") for e in container.get("env") or [] if e["name"] == name), None)


def test_helm_upgrade_reaches_the_cluster_operator_and_the_daemonsets(release: Helm, api: client.HttpApi) -> None:
    upgrade = ["upgrade", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--reuse-values", "--wait"]
    release.run(*upgrade, "--set", "gpuDevice.healthyInterval=9")
    assert api.get(CR_API, "ClusterOperator", "cluster-operator")["spec"]["gpuDevice"]["healthyInterval"] == 9
    wait_for(
        "the operator re-renders gpu-device",
        lambda: _env(api.get("apps/v1", "DaemonSet", "metax-gpu-device", NAMESPACE), "METAX_HEALTHY_INTERVAL") == "9",
        timeout=60,
    )


def test_a_components_service_account_deleted_by_hand_is_put_back_at_once(release: Helm, api: client.HttpApi) -> None:
    """The operator watches the RBAC it renders, under its own least-privilege ServiceAccount (docs/operator.md)."""
    api.delete("v1", "ServiceAccount", "metax-gpu-device", NAMESPACE)
    api.delete(RBAC, "RoleBinding", "metax-gpu-device-events", "default")
    wait_for(
        "ServiceAccount metax-gpu-device back",
        lambda: _labels_of(api, "v1", "ServiceAccount", "metax-gpu-device", NAMESPACE),
        timeout=30,  # well below the 10-minute resync: the watch, not the resync
    )
    wait_for(
        "RoleBinding default/metax-gpu-device-events back",
        lambda: _labels_of(api, RBAC, "RoleBinding", "metax-gpu-device-events", "default"),
        timeout=30,
    )
    labels = _labels_of(api, "v1", "ServiceAccount", "metax-gpu-device", NAMESPACE)
    assert labels[workloads.MANAGED_BY_LABEL] == workloads.MANAGED_BY


def _labels_of(api: client.HttpApi, api_version: str, kind: str, name: str, namespace: str) -> dict[str, str]:
    try:
        return dict(api.get(api_version, kind, name, namespace)["metadata"].get("labels") or {})
    except ClusterError:
        return {}


def test_helm_uninstall_runs_the_cleanup_job_for_real_and_leaves_nothing(
    release: Helm,
    api: client.HttpApi,
    process_node: processnode.ProcessNode,
    gpu_nodes: list[str],
    record_timing: Callable[[str, float], None],
) -> None:
    deployment = api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE)
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["METAX_UNINSTALL_TIMEOUT"] == "10"  # the chart value, set above
    began = time.monotonic()
    release.run(*uninstall_command(), timeout=600)
    record_timing("e2e: helm uninstall --wait (cleanup Job run for real)", time.monotonic() - began)
    logs = sorted((process_node.workdir / "pods").glob(f"{NAMESPACE}_metax-operator-cleanup-*/cleanup.log"))
    assert logs, "the pre-delete Job's pod never ran on the process node"
    text = logs[-1].read_text()
    assert "metax-operator uninstall" in text.splitlines()[0] or "uninstall --timeout" in text
    assert "cluster-operator deleted; the operator's cleanup has finished" in text
    assert present(api, CHART_OBJECTS) == []
    assert labelled_ours(api) == []
    # `helm uninstall --wait` waits for the Deployment, not its pod: kube-controller-manager's garbage collector
    # deletes the ReplicaSet and then the pod, and the process node stops it (SIGTERM) and finishes its deletion.
    # The collector's informers back off for up to a minute or more after the API server restarts that other
    # tests of the session make (docs/controlplane.md), hence the generous wait.
    left: list[str] = []

    def no_pod_left() -> bool:
        pods = api.list("v1", "Pod", namespace=NAMESPACE).items
        left[:] = [f"{p['metadata']['name']} ({_pod_state(p)})" for p in pods]
        return not pods

    try:
        wait_for("no pod left", no_pod_left, timeout=240)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {left}") from None
    for name in gpu_nodes:
        labels = api.get("v1", "Node", name)["metadata"].get("labels") or {}
        assert not [k for k in labels if k.startswith("metax-tech.com/")], labels


def _pod_state(pod: dict[str, Any]) -> str:
    meta, status = pod["metadata"], pod.get("status") or {}
    deleting = f", deleting since {meta['deletionTimestamp']}" if meta.get("deletionTimestamp") else ""
    return f"node {pod['spec'].get('nodeName')}, phase {status.get('phase')}{deleting}"
