"""The product on the oldest Kubernetes minor it supports (R-COMPAT), on a real API server of that minor.

``oldest_control_plane`` is a second control plane of the session: kube-apiserver, kube-controller-manager and
kube-scheduler of the minor that Chart.yaml's ``kubeVersion`` names as its lower bound (built by
``build.build_oldest`` from ``metax_dev/controlplane/gomod-oldest``), with the session's etcd and kwok.

Aspects: the server is the chart's lower bound (its ``/version`` minor is the one ``kubeVersion`` names, and
helm refuses the chart one minor lower); the README's ``helm install`` on it (every chart object, the operator
Deployment available, the CRD established, the webhook matching ``driver-config`` by label since this server
has no ``matchConditions``, no node-bound admission policy) with the NOTES saying what degrades (agent writes
not node-bound, R-NODEBOUND); what degrades, for real (the server keeps no CEL rules of the CRD, so a spec only
they refuse is stored) while the structural schema still refuses a bad enum with its path; ``helm uninstall
--wait`` leaves nothing of ours; a hand upgrade of the CRD with ``kubectl apply`` is refused for the field this
server lacks (``fieldPath``) and goes through with ``--validate=false``.
The operator (a local process, as in test_install.py) on it: it converges Ready on the GPU nodes only;
an edit reaches the live DaemonSets; the spec the missing CEL rule would refuse ends Degraded with the field path
and nothing applied; deleting the CR leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import VersionApi
from operator_helpers import CR_API, NS, Env, cluster_operator, wait_for

from metax_core.cluster import workloads
from metax_core.errors import ClusterError, Conflict, NotFound
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev.controlplane import build, cluster
from metax_k8s import client
from tests.support.chart import (
    CHART_DIR,
    CHART_OBJECTS,
    NAMESPACE,
    NODE_BOUND_OBJECTS,
    RELEASE,
    Helm,
    install_command,
    labelled_ours,
    present,
)
from tests.support.cluster import wait_served

pytestmark = [pytest.mark.integration, pytest.mark.oldest_kubernetes]

CRD_NAME = "clusteroperators.gpu.metax-tech.com"
CRD_FILE = CHART_DIR / "crds" / f"{CRD_NAME}.yaml"


def _lower_bound() -> tuple[int, int]:
    """The (major, minor) of Chart.yaml's ``kubeVersion: ">=X.Y.0-0"``; any other form fails here."""
    constraint = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", constraint)
    assert match, f"kubeVersion {constraint!r} is not a plain lower bound"
    return int(match.group(1)), int(match.group(2))


@pytest.fixture(scope="module")
def api(oldest_control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(oldest_control_plane.kubeconfig_path), user_agent="oldest-tests")


@pytest.fixture(scope="module")
def helm(oldest_control_plane: cluster.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(oldest_control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm-oldest"))


def test_the_server_is_the_charts_lower_bound_and_helm_refuses_one_minor_older(api: client.HttpApi, helm: Helm) -> None:
    major, minor = _lower_bound()
    version = VersionApi(api.client).get_code()
    assert (int(version.major), int(version.minor.rstrip("+"))) == (major, minor), version.git_version
    registry = ("--set", f"registry={REGISTRY_EXAMPLE}")
    older = helm.run(
        "template", RELEASE, str(CHART_DIR), *registry, "--kube-version", f"{major}.{minor - 1}.0", check=False
    )
    assert older.returncode != 0 and "kubeVersion" in older.stderr, older.stderr
    helm.run("template", RELEASE, str(CHART_DIR), *registry, "--kube-version", f"{major}.{minor}.0")


def _wait_available(api: client.HttpApi) -> None:
    wait_for(
        "the metax-operator Deployment available",
        lambda: (
            api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE).get("status", {}).get("availableReplicas")
            == 1
        ),
        timeout=120,
    )


@pytest.fixture
def no_release(helm: Helm, api: client.HttpApi) -> Iterator[None]:
    assert present(api, CHART_OBJECTS) == []
    yield
    if RELEASE in helm.run("list", "-n", NAMESPACE, "-q").stdout:
        helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait")


@pytest.mark.usefixtures("no_release")
def test_helm_install_degrades_with_a_note_then_uninstall_leaves_nothing(helm: Helm, api: client.HttpApi) -> None:
    out = helm.run(*install_command("r.example/metax", "2.18.0")).stdout
    assert len(present(api, CHART_OBJECTS)) == len(CHART_OBJECTS)
    assert api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE)["status"]["availableReplicas"] == 1
    # The NOTES say what this server does not do, and who does it instead.
    assert "CEL" in out and "webhook" in out and "Degraded" in out, out
    assert "matchConditions" in out and "app.kubernetes.io/managed-by=metax-operator" in out, out
    # R-NODEBOUND: no ValidatingAdmissionPolicy here (1.30+), and the notes say plainly what that leaves open.
    assert present(api, NODE_BOUND_OBJECTS) == []
    notes = " ".join(out.split())
    assert "the node agents' writes are NOT node-bound here" in notes, out
    assert "may patch every Node" in notes and "metax-operator-node-bound" in notes, out

    stored = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME)
    established = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert established["Established"] == "True"
    assert "x-kubernetes-validations" not in json.dumps(stored["spec"])  # the server dropped every CEL rule
    assert "x-kubernetes-validations" in CRD_FILE.read_text()  # ... that the chart ships

    webhook = api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook")
    by_name = {w["name"]: w for w in webhook["webhooks"]}
    driver_config = by_name["driver-config.gpu.metax-tech.com"]
    assert "matchConditions" not in driver_config
    assert driver_config["objectSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "metax-operator"}}

    # The structural schema still works on this server: a bad enum is refused with its path ...
    bad_enum = cluster_operator({"driver": {"deployPolicy": "Sometimes", "payload": {"version": "1.0.0"}}})
    bad_enum["metadata"]["name"] = "enum-check"
    with pytest.raises(ClusterError, match=r"spec\.driver\.deployPolicy") as refused:
        api.create(bad_enum, dry_run=True)
    assert refused.value.status == 422
    # ... but what only a CEL rule refuses is stored (the webhook refuses it when the operator serves it).
    cel_only = cluster_operator({"driver": {"payload": {"version": "1.0.0"}, "upgradePolicy": {"enableRollout": True}}})
    cel_only["metadata"]["name"] = "cel-check"
    assert api.create(cel_only, dry_run=True)["spec"]["driver"]["upgradePolicy"]["upgradeSteps"] == []

    helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    assert present(api, CHART_OBJECTS) == []
    assert labelled_ours(api) == []
    assert RELEASE not in helm.run("list", "-n", NAMESPACE, "-q").stdout


def test_a_hand_upgrade_of_the_crd_needs_validate_false(
    oldest_control_plane: cluster.ControlPlane, api: client.HttpApi
) -> None:
    kubectl = str(build.build(quiet=True).binary("kubectl"))
    env = {"KUBECONFIG": str(oldest_control_plane.kubeconfig_path), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}

    def apply(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [kubectl, "apply", *flags, "-f", str(CRD_FILE)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    strict = apply()
    assert strict.returncode != 0 and 'unknown field "fieldPath"' in strict.stderr, strict.stderr
    loose = apply("--validate=false")
    assert loose.returncode == 0, loose.stderr
    stored = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME)
    assert {c["type"]: c["status"] for c in stored["status"]["conditions"]}["Established"] == "True"
    assert "fieldPath" not in json.dumps(stored["spec"])


# ------------------------------------------------------------------ the operator on the oldest minor


@pytest.fixture(scope="module")
def operator_api(api: client.HttpApi) -> client.HttpApi:
    """The chart's CRD as helm installs it (a plain create: the server drops what it does not know), the namespace."""
    with contextlib.suppress(Conflict):
        api.create(yaml.safe_load(CRD_FILE.read_text()))
    wait_served(api, CR_API, "ClusterOperator")
    with contextlib.suppress(Conflict):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return api


@pytest.fixture
def oldest_env(
    oldest_control_plane: cluster.ControlPlane, operator_api: client.HttpApi, tmp_path: Path
) -> Iterator[Env]:
    names = sorted(oldest_control_plane.node_names)[:3]
    env = Env(operator_api, names[:2], names[2:], tmp_path, oldest_control_plane.kubeconfig_path)
    env.label_gpu_nodes(env.gpu_nodes)
    try:
        yield env
    finally:
        with contextlib.suppress(ClusterError):
            env.api.delete(CR_API, "ClusterOperator", "cluster-operator")
        with contextlib.suppress(AssertionError):
            wait_for("cluster-operator finalized", lambda: not _exists(env), timeout=60)
        for p in env.processes:
            p.stop()
        if _exists(env):
            env.api.merge_patch(CR_API, "ClusterOperator", "cluster-operator", {"metadata": {"finalizers": None}})
        for name in oldest_control_plane.node_names:
            env.api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: None}}})


def _exists(env: Env) -> bool:
    try:
        env.cr()
    except NotFound:
        return False
    return True


def _ready(env: Env) -> bool:
    c = env.condition("Ready")
    return c is not None and c["status"] == "True"


def test_the_operator_installs_edits_and_uninstalls_on_the_oldest_minor(oldest_env: Env) -> None:
    env = oldest_env
    env.api.apply(cluster_operator(), field_manager="helm")
    env.start_operator()
    for component in ("runtime", "driver", "maca", "gpuDevice", "vfioManager"):
        wait_for(f"{component} on GPU nodes", lambda c=component: env.running_nodes(c) == set(env.gpu_nodes))
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    status: dict[str, Any] = env.cr()["status"]
    assert status["observedGeneration"] == env.cr()["metadata"]["generation"]

    spec = cluster_operator()["spec"]
    spec["maca"] = {"podTemplateSpec": {"spec": {"nodeSelector": {"zone": "a"}}}}
    spec["runtime"] = {"deploy": False}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("dependents of runtime pruned", lambda: "metax-gpu-device" not in env.daemonsets())
    spec["runtime"] = {"deploy": True}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("maca back", lambda: env.ds("metax-maca") is not None)
    selector = env.ds("metax-maca")["spec"]["template"]["spec"]["nodeSelector"]  # type: ignore[index]
    assert selector == {workloads.GPU_NODE_LABEL: "true", "zone": "a"}
    wait_for("Ready=True after the edits", lambda: _ready(env), timeout=120)

    env.api.merge_patch(
        "v1", "Node", env.gpu_nodes[0], {"metadata": {"labels": {"metax-tech.com/gpu.product": "C500"}}}
    )
    env.api.delete(CR_API, "ClusterOperator", "cluster-operator")
    wait_for("daemonsets gone", lambda: env.daemonsets() == set())
    wait_for("the CR gone", lambda: not _exists(env))
    labels = env.api.get("v1", "Node", env.gpu_nodes[0])["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("metax-tech.com/")]


def test_a_spec_only_cel_would_refuse_is_degraded_with_its_path_and_nothing_applied(oldest_env: Env) -> None:
    env = oldest_env
    spec = {"driver": {"payload": {"version": "2.14.6"}, "upgradePolicy": {"enableRollout": True}}}
    env.api.apply(cluster_operator(spec), field_manager="helm")  # stored: this server has no CEL
    env.start_operator()
    degraded = wait_for("Degraded", lambda: (c := env.condition("Degraded")) and c["reason"] == "InvalidSpec" and c)
    assert "driver.upgradePolicy.upgradeSteps" in degraded["message"], degraded
    assert env.daemonsets() == set()
