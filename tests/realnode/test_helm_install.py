"""The product as real pods, from its own images, installed with the real ``helm install`` on a real node
(issue 21 item 3; R-INSTALL, R-SECURITY, R-WEBHOOK, R-IMAGES).

One real node (kubelet + containerd + runc built here) on its own fake MetaX host (2 GPUs, the host's driver
2.18.0 loaded), whose containerd imported the images ``./run images`` builds and a TEST driver payload image
(`helm_release`). Nothing stands in for a pod: every pod below is a runc container from those images, with
its own network namespace (the node's pod network, docs/realnode.md "The pod network"), reaching the API server
through its in-cluster configuration (the ``kubernetes`` Service), with the security context and hostPaths
the chart and the operator render. The hostPaths point at the fake host through the TEST-ONLY chart value
``operator.testOnly.hostPathPrefix``.

In order:

* ``helm install --wait`` returns once the operator pod's readiness probe passed; the pod has an address of
  the node's pod range, runs as UID 65532 with no capability on a read-only root, and the token in it is its
  ServiceAccount's (TokenReview);
* the API server calls the operator's webhook through the chart's Service (its EndpointSlice names the pod's
  address): ``kubectl apply`` of a bad spec is refused, and the refusal is in the operator pod's log;
* every node DaemonSet the operator renders (gpu-label, driver, vfio-manager, gpu-device) runs as a container
  of its image with the rendered security context (privileged: every capability) and sees the fake host
  under ``/host``; the driver pod's init container ran the payload image and left ``driver/metax.ko`` for
  driver-manager; gpu-label published the node's GPU labels from the fake host's PCI functions; driver-manager
  and gpu-device wrote their host files on the fake host; gpu-label and vfio-manager are Ready;
* driver-manager stages the payload's ``bin/mx-smi`` (the driver's own tool: no image carries MetaX's tool,
  docs/images.md) on the host and points ``/var/lib/metax/drivers/current`` at the running driver's, where every
  agent that runs mx-smi finds it (`metax_core.node.payload_layout`); the driver turns ready, gpu-device
  registers with the real kubelet, and a workload pod asking for ``metax-tech.com/gpu: 2`` runs with exactly
  its two GPUs' device nodes, injected by containerd from the CDI spec gpu-device wrote;
* ``helm uninstall --wait`` runs the pre-delete Job as a real pod on the node, and afterwards nothing of
  ours is left: no objects, no pods, no ``metax-tech.com`` node labels or annotations, no host files the
  agents wrote on the fake host.

The test payload's mx-smi is the fake host's (`metax_hw_fake.builder.portable_tool`, run by the image's own
Python on the fake host at the agent's ``METAX_HOST_ROOT``); with the test-only host path prefix the agents also
mount the fake host's state directory (`metax_core.cluster.host_paths.TEST_FAKE_HOST_DIR`). Not covered here
(docs/realnode.md "The product as real pods"): driver-manager's module tools run on this machine's own kernel
(``nsenter --target 1``), not the fake host's, so the payload is installed only when the host already runs its
version (``keep``), and container-runtime and maca are stand-ins (their readiness signals published by the test).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from metax_core.cluster import workloads
from metax_core.node import payload_layout, readiness
from metax_core.topology import cluster_view
from metax_core.topology import document as topology_document
from metax_dev.controlplane import cluster as controlplane
from metax_dev.images import build as images_build

from . import gpus, helm_release, pods
from .helm_release import NAMESPACE, Release

pytestmark = pytest.mark.realnode

AGENTS = helm_release.AGENTS
DEPLOYMENTS = helm_release.DEPLOYMENTS
WAIT = 120.0
#: Where on the fake host the agents write (compared before the install and after the uninstall).
AGENT_HOST_DIRS = ("var/lib/metax", "run/metax", "var/run/cdi", "var/log/metax")
PREFIX = "metax-tech.com/"


def host_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for d in AGENT_HOST_DIRS for p in (root / d).rglob("*") if (root / d).exists()}


@pytest.fixture(scope="module")
def release(realnode_plane: controlplane.ControlPlane) -> Iterator[Release]:
    built = images_build.build()
    with helm_release.real_node(realnode_plane, built) as r:
        r.stand_in_for_runtime_and_maca()  # the stand-ins' signal files stay: no agent of theirs removes them
        r.host_before = host_files(r.fake.root)
        started = time.monotonic()
        r.helm(*r.install_args())
        r.timings["helm install --wait"] = time.monotonic() - started
        try:
            yield r
        finally:
            if helm_release.RELEASE in r.helm("list", "-n", NAMESPACE, "-q").stdout:
                r.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait", check=False)


def _pods(r: Release, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in helm_release.pods(r)
        if p["metadata"]["labels"].get("app.kubernetes.io/name") == name
        and "job-name" not in p["metadata"]["labels"]
        and not p["metadata"].get("deletionTimestamp")
    ]


def _one(r: Release, name: str) -> dict[str, Any]:
    found = _pods(r, name)
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    return found[0]


def _exec(r: Release, pod: str, *command: str) -> str:
    done = r.kubectl("exec", "-n", NAMESPACE, pod, "--", *command)
    assert done.returncode == 0, f"{' '.join(command)} in {pod}: {done.stderr}"
    return done.stdout


def _describe(r: Release) -> str:
    described = r.kubectl("describe", "pods", "-n", NAMESPACE).stdout
    logs = "\n".join(
        f"--- {p['metadata']['name']}\n"
        + r.kubectl("logs", "-n", NAMESPACE, p["metadata"]["name"], "--all-containers", "--tail=30").stdout
        for p in helm_release.pods(r)
    )
    return described[-6000:] + "\n" + logs


def test_the_operator_runs_as_a_real_pod_with_its_own_token(release: Release, kube: client.CoreV1Api) -> None:
    r = release
    deployment = json.loads(r.kubectl("get", "deployment", "metax-operator", "-n", NAMESPACE, "-o", "json").stdout)
    assert deployment["status"]["availableReplicas"] == 1  # helm --wait: the real readiness probe passed
    pod = _one(r, "metax-operator")
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == r.node
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(r.member.pod_cidr)
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] and status["image"] == "docker.io/library/metax-operator:0.1.0"
    assert _exec(r, name, "id", "-u").strip() == "65532"
    # capabilities: drop ALL, no privilege escalation (the rendered securityContext, enforced by runc)
    status_lines = _exec(r, name, "cat", "/proc/self/status").splitlines()
    caps = {line.split(":")[0]: line.split()[1] for line in status_lines if line.startswith(("CapEff", "NoNewPrivs"))}
    assert int(caps["CapEff"], 16) == 0 and caps["NoNewPrivs"] == "1"
    read_only = r.kubectl("exec", "-n", NAMESPACE, name, "--", "touch", "/probe")
    assert read_only.returncode != 0 and "Read-only file system" in read_only.stderr
    token = _exec(r, name, "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
    api = client.AuthenticationV1Api(kube.api_client)
    review: Any = api.create_token_review({"spec": {"token": token}})
    assert review.status.authenticated is True
    assert review.status.user.username == f"system:serviceaccount:{NAMESPACE}:metax-operator"
    assert review.status.user.extra["authentication.kubernetes.io/pod-name"] == [name]


def test_the_webhook_behind_its_service_refuses_a_bad_spec(release: Release) -> None:
    r = release
    pod = _one(r, "metax-operator")
    slices = json.loads(
        r.kubectl(
            "get",
            "endpointslices",
            "-n",
            NAMESPACE,
            "-l",
            "kubernetes.io/service-name=metax-operator-webhook",
            "-o",
            "json",
        ).stdout
    )["items"]
    addresses = [a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]]
    assert addresses == [pod["status"]["podIP"]]
    steps = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
        "spec": {
            "driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 3}, {"replicas": 2}, {"replicas": "100%"}]}}
        },
    }
    refused = r.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(steps))
    assert refused.returncode != 0
    assert "spec.driver.upgradePolicy.upgradeSteps[1].replicas" in refused.stderr
    log = r.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout
    assert "refusing UPDATE ClusterOperator cluster-operator: spec.driver.upgradePolicy.upgradeSteps[1]" in log


def test_every_node_agent_runs_from_its_image_against_the_fake_host(release: Release, kube: client.CoreV1Api) -> None:
    r = release

    def started() -> bool:
        for name in AGENTS:
            found = _pods(r, name)
            statuses = [s for p in found for s in (p.get("status") or {}).get("containerStatuses") or []]
            if len(found) != 1 or not statuses or "running" not in statuses[0]["state"]:
                return False
        return all(_one(r, name)["status"]["containerStatuses"][0]["ready"] for name in AGENTS)

    helm_release.wait(started, "the node agents' pods running", WAIT, lambda: _describe(r))
    rendered = {
        d["metadata"]["name"]: d
        for d in json.loads(r.kubectl("get", "daemonsets", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    }
    # gpu-device waits for every deployed prerequisite (runtime and maca are deployed, on no node: helm_release).
    device_env = {
        e["name"]: e.get("value")
        for e in rendered["metax-gpu-device"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert device_env[readiness.REQUIRED_ENV] == "gpu-label,container-runtime,driver,maca"
    assert rendered["metax-container-runtime"]["status"]["desiredNumberScheduled"] == 0
    gpus = sorted(str(a) for a in r.fake.gpu_addresses())
    for name in AGENTS:
        pod = _one(r, name)
        spec = rendered[name]["spec"]["template"]["spec"]
        container = pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["image"] == f"docker.io/library/{name}:0.1.0"
        assert container["securityContext"] == spec["containers"][0]["securityContext"] == {"privileged": True}
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                assert volume["hostPath"]["path"].startswith(str(r.fake.root) + "/")
        # Privileged: every capability; the fake host's PCI functions under /host/sys (hostPath).
        status = _exec(r, pod["metadata"]["name"], "cat", "/proc/self/status")
        cap_eff = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
        assert int(cap_eff, 16) == int(Path("/proc/self/status").read_text().split("CapEff:")[1].split()[0], 16)
        if any(m["mountPath"] == "/host/sys" for m in container.get("volumeMounts", [])):
            listed = _exec(r, pod["metadata"]["name"], "ls", "/host/sys/bus/pci/devices").split()
            assert set(gpus) <= set(listed)
    driver = _one(r, "metax-driver")
    init = driver["status"]["initContainerStatuses"][0]
    assert init["image"] == helm_release.PAYLOAD_IMAGE and init["state"]["terminated"]["exitCode"] == 0
    listed = _exec(r, driver["metadata"]["name"], "ls", workloads.PAYLOAD_DIR + "/driver")
    assert listed.split() == ["metax.ko"]

    labels = kube.read_node(r.node).metadata.labels or {}
    assert labels.get(workloads.GPU_NODE_LABEL) == "true"
    assert labels.get(PREFIX + "gpu.count") == str(len(gpus))
    root = r.fake.root
    helm_release.wait(
        lambda: (
            (root / "var/lib/metax/driver-manager/baseline.json").is_file()
            and (root / "run/metax/ready/driver.json").is_file()
            and (root / "var/run/cdi/metax-tech.com-gpu.json").is_file()
        ),
        "driver-manager's and gpu-device's files on the fake host",
        WAIT,
        lambda: _describe(r),
    )
    cdi = json.loads((root / "var/run/cdi/metax-tech.com-gpu.json").read_text())
    assert len(cdi["devices"]) == len(gpus)


def test_a_gpu_pod_gets_its_devices_from_the_agents_pods(
    release: Release, kube: client.CoreV1Api, namespace: str
) -> None:
    r = release
    helm_release.wait(
        lambda: gpus.allocatable(kube, r.node) == helm_release.PFS,
        f"{helm_release.PFS} allocatable {gpus.GPU}",
        WAIT,
        lambda: _describe(r),
    )
    # The driver's tool, staged from the payload, is what the agents' health checks ran (no image carries it).
    current = r.fake.root / payload_layout.HOST_CURRENT.lstrip("/")
    assert os.readlink(current) == helm_release.DRIVER_VERSION
    assert (r.fake.root / payload_layout.HOST_TOOLS_DIR.lstrip("/") / "mx-smi").is_file()
    device_pod = _one(r, "metax-gpu-device")["metadata"]["name"]
    listed = _exec(r, device_pod, "/host" + payload_layout.HOST_TOOLS_DIR + "/mx-smi", "-L")
    assert len([line for line in listed.splitlines() if line.startswith("GPU")]) == helm_release.PFS, listed

    script = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; ' + gpus.LIST_DEVICES + "echo DONE; sleep 3600"
    kube.create_namespaced_pod(namespace, pods.busybox_pod("two-gpus", r.node, script, resources={gpus.GPU: "2"}))
    text = pods.wait_logs(kube, namespace, "two-gpus", "DONE")
    visible = sorted(gpus.env_value(text, "VISIBLE").split(","))
    assert visible == sorted(str(a) for a in r.fake.gpu_addresses())
    seen = gpus.device_lines(text)
    assert set(seen) == gpus.expected_nodes(r.fake, visible), seen
    major, minor = gpus.DEVICE_NUMBERS
    assert all(v == f"character special file {major:x}:{minor:x}" for v in seen.values()), seen

    # The data-exporter's pod (its image, the driver's mx-smi, the real kubelet's PodResources) attributes both
    # GPUs to the workload on its /metrics, scraped at the pod's address as Prometheus would (R-EXPORTER).
    exporter = _one(r, "metax-data-exporter")
    url = f"http://{exporter['status']['podIP']}:{workloads.EXPORTER_PORT}/metrics"

    def attributed() -> dict[str, dict[str, str]]:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        usage = [s for f in text_string_to_metric_families(text) if f.name == "mx_gpu_usage" for s in f.samples]
        held = {s.labels["pci_address"]: s.labels for s in usage if s.labels.get("pod") == "two-gpus"}
        return held if len(held) == len(visible) else {}

    held = helm_release.wait(attributed, "the exporter attributing both GPUs to the pod", WAIT, lambda: _describe(r))
    assert sorted(held) == visible
    assert {(h["namespace"], h["container"]) for h in held.values()} == {(namespace, "main")}


def test_the_cluster_operator_is_ready_with_topology_and_the_scheduler(
    release: Release, kube: client.CoreV1Api
) -> None:
    """Every component deployed (runtime and maca as stand-ins) and Ready: topo-worker published the node's
    topology from its pod, topo-master built the cluster view, the extender answers (C7, C9, R-READY)."""
    r = release

    def ready() -> dict[str, Any] | None:
        done = r.kubectl("get", "clusteroperators", "cluster-operator", "-o", "json")
        status = json.loads(done.stdout).get("status") or {} if done.returncode == 0 else {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return status if conditions.get("Ready", {}).get("status") == "True" else None

    status = helm_release.wait(ready, "cluster-operator Ready", WAIT, lambda: _describe(r))
    assert status.get("phase") == "Ready", status
    annotations = kube.read_node(r.node).metadata.annotations or {}
    doc = topology_document.decode(annotations[topology_document.TOPOLOGY])
    assert sorted(str(g.address) for g in doc.gpus) == sorted(str(a) for a in r.fake.gpu_addresses())
    assert json.loads(annotations[topology_document.SCORES]).keys() == {"1", "2"}

    def view() -> dict[str, Any]:
        cm = kube.read_namespaced_config_map(cluster_view.NAME, NAMESPACE)
        return cluster_view.decode((cm.data or {}).get(cluster_view.KEY, "")) if cm.data else {}

    nodes = helm_release.wait(view, "topo-master's cluster view", WAIT, lambda: _describe(r))
    assert nodes[r.node].gpus == helm_release.PFS
    for name in DEPLOYMENTS:
        pod = _one(r, name)
        assert pod["status"]["containerStatuses"][0]["ready"], name
        assert _exec(r, pod["metadata"]["name"], "id", "-u").strip() == "65532"


def test_uninstall_runs_the_pre_delete_job_as_a_real_pod_and_leaves_nothing(
    release: Release, kube: client.CoreV1Api
) -> None:
    r = release
    started = time.monotonic()
    r.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait")
    r.timings["helm uninstall --wait"] = time.monotonic() - started
    events = kube.list_namespaced_event(NAMESPACE).items
    job_pods = {
        e.involved_object.name
        for e in events
        if e.involved_object.kind == "Pod"
        and e.involved_object.name.startswith("metax-operator-cleanup-")
        and e.reason == "Started"
        and e.source.host == r.node
    }
    assert len(job_pods) == 1, sorted({(e.involved_object.name, e.reason) for e in events})
    helm_release.wait(lambda: not helm_release.pods(r), "every pod of ours gone", WAIT, lambda: _describe(r))
    for kind in ("daemonsets", "deployments", "jobs", "services", "secrets"):
        left = json.loads(r.kubectl("get", kind, "-n", NAMESPACE, "-o", "json").stdout)["items"]
        assert left == [], (kind, [o["metadata"]["name"] for o in left])
    config_maps = json.loads(r.kubectl("get", "configmaps", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [c["metadata"]["name"] for c in config_maps] == ["kube-root-ca.crt"]
    accounts = json.loads(r.kubectl("get", "serviceaccounts", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [a["metadata"]["name"] for a in accounts] == ["default"]
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations"):
        names = [o["metadata"]["name"] for o in json.loads(r.kubectl("get", kind, "-o", "json").stdout)["items"]]
        assert not [n for n in names if n.startswith("metax")], (kind, names)
    operators = r.kubectl("get", "clusteroperators", "-o", "json")
    assert operators.returncode == 0 and json.loads(operators.stdout)["items"] == []
    node = kube.read_node(r.node).metadata
    assert not [k for k in {**(node.labels or {}), **(node.annotations or {})} if k.startswith(PREFIX)]
    assert host_files(r.fake.root) == r.host_before
