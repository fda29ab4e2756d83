"""`helm install / upgrade / uninstall` of charts/metax-operator on the real control plane (R-INSTALL, R-VALUES).

Covers: ``helm lint --strict`` (and a bad value refused by the generated schema with its path); ``helm template``
with the operator's pod security of 000 Table 1.3.1 (and every operator-rendered DaemonSet: privileged and hostPID
only where the table says, host paths only those of §1.3.2); ``helm install`` with defaults but the registry (none
given: refused naming it, R-RELEASE) and with the README's command (``--set registry=...``): every chart object
present, the operator Deployment available (kwok runs its pod), the ``cluster-operator`` spec = the values; ``helm
upgrade`` with changed values reaches the CR; the ``--set-file tolerations=<file>`` path of §3.2.4; the values Helm
users write (issue 20): ``--set`` and ``--set-string`` of the same assignments make the same ``cluster-operator``
(booleans and integers, stored by the API server with the CRD) and mean what the validator reads from the values,
and strings Helm keeps as strings are refused by the schema with their path; ``helm uninstall --wait`` runs the
pre-delete cleanup Job before it deletes the operator, then leaves nothing of ours (the CRD stays, by Helm
convention, as the README says).

Here kwok "runs" the operator's pod and the cleanup Job (nothing executes): nothing in this module depends on
the operator running. tests/integration/chart/test_helm_lifecycle.py runs the same chart with the operator's pod and the
cleanup Job really running on a process node (docs/processnode.md).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from metax_core import components, release
from metax_core.cluster import workloads
from metax_core.errors import InvalidSpec, NotFound
from metax_core.ports.cluster import WatchEventType
from metax_core.spec import model as spec_model
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_k8s import client, crd
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
    uninstall_command,
)
from tests.support.cluster import wait_served

pytestmark = pytest.mark.integration

# 000 Table 1.3.1: workload -> (privileged, hostPID); hostIPC and hostNetwork are "no" for all.
TABLE_1_3_1 = {
    "metax-operator": (False, False),
    "metax-gpu-label": (True, False),
    # Not in Table 1.3.1 (issue 38 item 3): gpu-label's unprivileged half, the one workload on every node.
    "metax-gpu-discovery": (False, False),
    "metax-gpu-device": (True, True),
    "metax-container-runtime": (True, True),
    "metax-driver": (True, True),
    "metax-maca": (True, True),
    "metax-topo-master": (False, False),
    "metax-topo-worker": (True, False),
    "metax-data-exporter": (True, False),
    "metax-gpu-scheduler": (False, False),
    # Not in Table 1.3.1 (C10 came later): it rebinds PCI functions through /sys, so privileged; no hostPID.
    "metax-vfio-manager": (True, False),
    # Not in Table 1.3.1 either (R-DRA): gpu-device's host facts, privileged like it; PodResources over its
    # socket, so no hostPID.
    "metax-dra-driver": (True, False),
}
# 000 §1.3.2: path -> read-only.
SECTION_1_3_2 = {
    "/dev": False,
    "/sys": False,
    "/lib/modules": True,
    "/lib/firmware": False,
    "/etc/docker": False,
    "/etc/containerd": False,
    "/etc/crio": False,
    "/var/lib/kubelet/device-plugins": False,
    "/var/lib/kubelet/pod-resources": True,
    # R-DRA (not in §1.3.2): the kubelet's plugin registration and DRA plugin socket directories.
    "/var/lib/kubelet/plugins_registry": False,
    "/var/lib/kubelet/plugins": False,
    "/var/run/cdi": False,
    "/var/lib/metax": False,
    "/run/metax": False,
    "/var/log/metax": False,
}


@pytest.fixture(scope="module")
def helm(control_plane: cluster.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(control_plane.kubeconfig_path))


REGISTRY = "r.example/metax"
"""The registry every render here names (R-RELEASE: the chart has no default; a later ``--set`` overrides it)."""


def _template(helm: Helm, *args: str) -> list[dict[str, Any]]:
    out = helm.run(
        "template",
        RELEASE,
        str(CHART_DIR),
        "-n",
        NAMESPACE,
        "--kube-version",
        "1.36.0",
        "--set",
        f"registry={REGISTRY}",
        *args,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_lint_strict_and_the_schema_refuses_bad_values_with_their_path(helm: Helm) -> None:
    helm.run("lint", "--strict", str(CHART_DIR), "--set", f"registry={REGISTRY}")
    bad = helm.run("lint", "--strict", str(CHART_DIR), "--set", "driver.deployPolicy=Sometimes", check=False)
    assert bad.returncode != 0
    assert "/driver/deployPolicy" in bad.stdout + bad.stderr and "PreferCloud" in bad.stdout + bad.stderr
    typo = helm.run("template", RELEASE, str(CHART_DIR), "--set", "driver.upgradePolicy.maxParalel=1", check=False)
    assert typo.returncode != 0 and "maxParalel" in typo.stderr
    # R-RELEASE: no default registry, so no silent Docker Hub pull; the refusal names the value and an example.
    unnamed = helm.run("template", RELEASE, str(CHART_DIR), check=False)
    assert unnamed.returncode != 0
    assert "registry: is required" in unnamed.stderr and "--set registry=registry.example.com/metax" in unnamed.stderr


def _check_pod(name: str, pod: dict[str, Any]) -> None:
    privileged, host_pid = TABLE_1_3_1[name]
    assert bool(pod.get("hostPID")) is host_pid, name
    assert not pod.get("hostIPC") and not pod.get("hostNetwork"), name
    for container in pod["containers"]:
        context = container.get("securityContext", {})
        assert bool(context.get("privileged")) is privileged, name
        if not privileged:
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            assert context["runAsNonRoot"] is True and context["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        for volume in pod.get("volumes", []):
            if "hostPath" in volume:
                path = volume["hostPath"]["path"]
                assert path in SECTION_1_3_2, (name, path)
                if SECTION_1_3_2[path]:
                    assert mounts[volume["name"]]["readOnly"] is True, (name, path)


def test_every_pod_has_exactly_the_privileges_of_table_1_3_1_and_the_host_paths_of_1_3_2(helm: Helm) -> None:
    rendered = _template(helm)
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    _check_pod("metax-operator", pod)
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    (container,) = pod["containers"]
    assert container["image"] == f"r.example/metax/metax-operator:{release.running()}"
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    every = {"registry": REGISTRY, "driver": {"payload": {"version": "1.0.0"}}, "exporter": {"deploy": True}}
    every |= {"gpuScheduler": {"deploy": True}, "draDriver": {"deploy": True}}
    objects = workloads.render(validation.parse(every)).objects
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if "template" in o.get("spec", {})}
    assert set(pods) == {w.name for info in components.CATALOGUE for w in info.workloads}
    for name, spec in pods.items():
        _check_pod(name, spec)


def test_set_file_tolerations_reaches_the_cluster_operator(helm: Helm, tmp_path: Path) -> None:
    file = tmp_path / "tolerations.yaml"
    file.write_text(
        'tolerations:\n  - key: "key1"\n    operator: "Equal"\n    value: "value1"\n    effect: "NoSchedule"\n'
    )
    rendered = _template(helm, "--set-file", f"tolerations={file}", "--set", "driver.payload.version=1.0.0")
    (co,) = [d for d in rendered if d["kind"] == "ClusterOperator"]
    assert co["spec"]["tolerations"] == [
        {"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}
    ]
    assert validation.parse(co).tolerations is not None


# Issue 20: values as Helm users write them. Each assignment once with --set (Helm makes booleans and
# integers) and once with --set-string (strings): the values schema takes both, and they mean the same.
ASSIGNMENTS = (
    "driver.payload.version=2.18.0",
    "gpuDevice.deploy=false",
    "gpuDevice.healthyInterval=9",
    "gpuDevice.sgpuShares=32",
    "driver.fwEnableVirt=true",
    "driver.upgradePolicy.enableRollout=true",
    "driver.upgradePolicy.maxParallel=2",
    "driver.upgradePolicy.maxFailureThreshold=1",
    "driver.upgradePolicy.upgradeSteps[0].replicas=1",
    "driver.upgradePolicy.upgradeSteps[0].pause=false",
    "driver.upgradePolicy.upgradeSteps[0].toleration=0",
    "driver.upgradePolicy.upgradeSteps[1].replicas=100%",
    "driver.upgradePolicy.upgradeSteps[1].pauseDuration=10000",
    "exporter.deploy=true",
    "exporter.service.type=NodePort",
    "exporter.service.port=40000",
    "vfioManager.vfioConfig[0].nodeName=gpu-.*",
    "vfioManager.vfioConfig[0].gpus=1",
    "tolerations[0].key=k",
    "tolerations[0].operator=Exists",
    "tolerations[0].effect=NoExecute",
    "tolerations[0].tolerationSeconds=60",
)


def _values_document(assignments: tuple[str, ...]) -> dict[str, Any]:
    """The --set-string assignments as a values file would hold them: every value a string (and the registry
    every render here names)."""
    document: dict[str, Any] = {"registry": REGISTRY}
    for assignment in assignments:
        path, _, value = assignment.partition("=")
        node: Any = document
        keys = [k for part in path.split(".") for k in part.replace("]", "").split("[")]
        for key, following in zip(keys, [*keys[1:], None], strict=True):
            index: Any = int(key) if key.isdigit() else key
            if following is None:
                node[index] = value
                break
            child: Any = [] if following.isdigit() else {}
            if isinstance(node, list):
                while len(node) <= index:
                    node.append(copy.deepcopy(child))
            else:
                node.setdefault(index, child)
            node = node[index]
    return document


@pytest.fixture(scope="module")
def crd_installed(api: client.HttpApi) -> client.HttpApi:
    api.apply(crd.crd(), field_manager="chart-tests", force=True)
    wait_served(api, f"{spec_model.API_GROUP}/{spec_model.API_VERSION}", spec_model.KIND)
    return api


def test_set_and_set_string_mean_the_same_and_the_api_server_stores_it(
    helm: Helm, crd_installed: client.HttpApi
) -> None:
    def cluster_operator(flag: str) -> dict[str, Any]:
        args = [a for assignment in ASSIGNMENTS for a in (flag, assignment)]
        (co,) = [d for d in _template(helm, *args) if d["kind"] == "ClusterOperator"]
        return co

    typed, strings = cluster_operator("--set"), cluster_operator("--set-string")
    assert typed["spec"]["gpuDevice"]["healthyInterval"] == 9 and strings["spec"]["gpuDevice"]["deploy"] is False
    # The chart's template made booleans and integers of the strings; gpus and pauseDuration keep their own
    # forms ("1" and 1, "10000" and 10000), which the converter reads alike in the object too.
    own_forms = [(typed, 1, 10000), (strings, "1", "10000")]
    for co, gpus, pause_duration in own_forms:
        assert co["spec"]["vfioManager"]["vfioConfig"][0].pop("gpus") == gpus
        assert co["spec"]["driver"]["upgradePolicy"]["upgradeSteps"][1].pop("pauseDuration") == pause_duration
    assert strings == typed
    assert strings["spec"]["gpuDevice"]["deploy"] is False and strings["spec"]["exporter"]["service"]["port"] == 40000
    # The same meaning as the validator reads the values (metax-operator validate -f values.yaml) and the object.
    parsed = validation.parse(_values_document(ASSIGNMENTS))
    for co, gpus, pause_duration in own_forms:
        co["spec"]["vfioManager"]["vfioConfig"][0]["gpus"] = gpus
        co["spec"]["driver"]["upgradePolicy"]["upgradeSteps"][1]["pauseDuration"] = pause_duration
    assert validation.parse(typed) == validation.parse(strings) == parsed
    assert parsed.vfio_manager.vfio_config[0].gpus == "1" and parsed.exporter.service.port == 40000
    assert parsed.driver.upgrade_policy.upgrade_steps[0].pause is False and parsed.driver.fw_enable_virt is True
    # And the API server stores what Helm creates (the CRD's types, ranges and CEL rules).
    stored = crd_installed.apply(strings, field_manager="chart-tests", force=True, dry_run=True)
    assert stored["spec"]["gpuDevice"]["healthyInterval"] == 9


@pytest.mark.parametrize(
    ("assignment", "path"),
    [
        ("gpuDevice.healthyInterval=09", "/gpuDevice/healthyInterval"),
        ("gpuDevice.deploy=yes", "/gpuDevice/deploy"),
        ("driver.upgradePolicy.maxParallel=2.5", "/driver/upgradePolicy/maxParallel"),
    ],
)
def test_strings_helm_keeps_as_strings_are_refused_by_the_schema_with_their_path(
    helm: Helm, assignment: str, path: str
) -> None:
    for flag in ("--set", "--set-string"):
        bad = helm.run("template", RELEASE, str(CHART_DIR), flag, assignment, check=False)
        assert bad.returncode != 0 and path in bad.stderr, (flag, bad.stderr)
        with pytest.raises(InvalidSpec, match=path.lstrip("/").replace("/", r"\.")):
            validation.parse(_values_document((assignment,)))


def _wait_available(api: client.HttpApi, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE).get("status", {})
        if status.get("availableReplicas") == 1:
            return
        time.sleep(0.5)
    raise AssertionError(f"metax-operator Deployment not available: {status}")


def _uninstall_and_check_nothing_remains(helm: Helm, api: client.HttpApi) -> None:
    seen: list[tuple[float, str]] = []
    stop = threading.Event()

    def record(api_version: str, kind: str) -> None:
        version = api.list(api_version, kind, namespace=NAMESPACE).resource_version
        while not stop.is_set():
            for event in api.watch(api_version, kind, namespace=NAMESPACE, resource_version=version, timeout_seconds=5):
                meta = event.object["metadata"]
                version = meta.get("resourceVersion", version)
                if event.type is WatchEventType.BOOKMARK:
                    continue
                seen.append((time.monotonic(), f"{event.type.value} {kind} {meta['name']}"))

    watchers = [
        threading.Thread(target=record, args=("batch/v1", "Job"), daemon=True),
        threading.Thread(target=record, args=("apps/v1", "Deployment"), daemon=True),
    ]
    for w in watchers:
        w.start()
    time.sleep(1)  # both watches open
    helm.run(*uninstall_command())
    stop.set()
    for w in watchers:
        w.join(timeout=15)
    events = [e for _, e in sorted(seen)]
    hook = events.index("ADDED Job metax-operator-cleanup")
    gone = events.index("DELETED Deployment metax-operator")
    assert hook < gone, events
    assert present(api, CHART_OBJECTS) == []
    assert present(api, NODE_BOUND_OBJECTS) == []
    assert labelled_ours(api) == []
    assert "metax-operator" not in helm.run("list", "-n", NAMESPACE, "-q").stdout
    # By Helm convention the CRD stays (README: `kubectl delete crd ...` removes it).
    api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "clusteroperators.gpu.metax-tech.com")


@pytest.fixture
def no_release(helm: Helm, api: client.HttpApi) -> Iterator[None]:
    assert present(api, CHART_OBJECTS) == []
    yield
    if RELEASE in helm.run("list", "-n", NAMESPACE, "-q").stdout:
        helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait")


@pytest.mark.usefixtures("no_release")
def test_install_with_defaults_then_uninstall_leaves_nothing(helm: Helm, api: client.HttpApi) -> None:
    # R-RELEASE: without a registry the install is refused before anything is created.
    refused = helm.run("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace", check=False)
    assert refused.returncode != 0 and "registry: is required" in refused.stderr
    assert present(api, CHART_OBJECTS) == []
    helm.run("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace", "--set", f"registry={REGISTRY}")
    assert len(present(api, CHART_OBJECTS)) == len(CHART_OBJECTS)
    co = api.get("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    assert co["spec"]["registry"] == REGISTRY and co["spec"]["driver"]["deployPolicy"] == "PreferCloud"
    _wait_available(api)
    _uninstall_and_check_nothing_remains(helm, api)


@pytest.mark.usefixtures("no_release")
def test_readme_install_upgrade_and_uninstall(helm: Helm, api: client.HttpApi) -> None:
    out = helm.run(*install_command("r.example/metax", "2.18.0")).stdout
    assert "rollout status deployment/metax-operator" in out  # NOTES.txt says what to check next
    assert len(present(api, CHART_OBJECTS)) == len(CHART_OBJECTS)
    # R-NODEBOUND: this server is new enough for the node-bound policy (its CEL: tests/.../test_node_bound.py).
    assert len(present(api, NODE_BOUND_OBJECTS)) == len(NODE_BOUND_OBJECTS)
    assert "NOT node-bound" not in out
    deployment = api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE)
    assert deployment["status"]["availableReplicas"] == 1  # --wait
    co = api.get("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    assert co["spec"]["registry"] == "r.example/metax"
    assert co["spec"]["driver"]["payload"]["version"] == "2.18.0"
    assert validation.parse(co).registry == "r.example/metax"

    upgrade = ["upgrade", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--reuse-values", "--wait"]
    helm.run(*upgrade, "--set", "registry=mirror.example/metax", "--set", "gpuDevice.healthyInterval=9")
    co = api.get("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    assert co["spec"]["registry"] == "mirror.example/metax"
    assert co["spec"]["gpuDevice"]["healthyInterval"] == 9
    strings = ("gpuDevice.healthyInterval=7", "exporter.deploy=true", "driver.upgradePolicy.maxParallel=3")
    helm.run(*upgrade, *(a for s in strings for a in ("--set-string", s)))  # issue 20: as --set would
    co = api.get("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    assert co["spec"]["gpuDevice"]["healthyInterval"] == 7 and co["spec"]["exporter"]["deploy"] is True
    assert co["spec"]["driver"]["upgradePolicy"]["maxParallel"] == 3
    assert co["spec"]["driver"]["payload"]["version"] == "2.18.0"  # reused
    image = api.get("apps/v1", "Deployment", "metax-operator", NAMESPACE)["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == f"mirror.example/metax/metax-operator:{release.running()}"
    _uninstall_and_check_nothing_remains(helm, api)


def test_nothing_is_left_when_this_module_ends(api: client.HttpApi) -> None:
    with pytest.raises(NotFound):
        api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook")
