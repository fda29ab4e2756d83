"""The whole product end to end on a real node, installed from a registry as an administrator does (issue 26 item
3; issue 39 items 3 and 4; R-INSTALL, R-RELEASE, R-SECURITY, R-WEBHOOK, R-IMAGES, R-MACA, R-EXPORTER, R-DRA, C7,
C9; issue 21 item 3).

The release (every image for linux/amd64 and linux/arm64 as OCI indexes, the chart pinned to them by digest) is
written as the air-gapped bundle, loaded with ``./run mirror`` into a real registry the test starts (Debian's
docker-registry on loopback, TLS from the harness's CA, a password), and installed with ``helm install
metax-operator oci://<registry>/metax/charts/metax-operator --version V --set registry=<registry>/metax`` and a pull
secret. One real node (kubelet + containerd + runc built here) on its own fake MetaX host (2 GPUs, the host's driver
2.18.0 loaded), whose containerd never saw the product's images and trusts the registry's CA (``hosts.toml``), pulls
every one of them by the pushed digest; only the TEST payload images (the driver's, two MXMACA SDKs, the vendor's:
`metax_dev.productnode.helm_release`) are imported. Every component is a pod from those images, installed with the
real ``helm install`` — container-runtime and maca included (issue 37 item 4): the node's containerd runs under a
real supervisor (Debian's daemontools) and reads its root file at ``/etc/containerd/config.toml``, so the
container-runtime pod configures it through its hostPath and restarts it the way it restarts a node whose runtime is
supervised (restart mode ``signal``: it stops the daemon serving the socket, the supervisor starts it again), and
every pod on the node keeps running through that restart. The session's kube-scheduler is reconfigured with the
gpu-scheduler extender, as docs/scheduler.md tells an administrator to. Each pod below is a runc container, with its
own network namespace on the node's pod network (docs/realnode.md "The pod network"), reaching the API server
through its in-cluster configuration, with the security context and hostPaths the chart and the operator render; the
hostPaths point at the fake host through the TEST-ONLY chart value ``operator.testOnly.hostPathPrefix``.

In order, every step asserted through the API server, the pods and the host:

* ``helm install --wait`` returns once the operator pod's readiness probe passed; the pod has an address of
  the node's pod range, runs as UID 65532 with no capability on a read-only root, and the token in it is its
  ServiceAccount's (TokenReview);
* the API server calls the operator's webhook through the chart's Service: ``kubectl apply`` of a bad spec is
  refused, and the refusal is in the operator pod's log;
* every node DaemonSet runs as a container of its image with the rendered security context and sees the fake
  host under ``/host``; the driver pod's init container ran the payload image; gpu-label published the node's
  GPU labels; driver-manager and gpu-device wrote their host files on the fake host;
* the container-runtime pod configured the node's containerd with one restart (another containerd process serves
  the socket, with runtime handler ``metax``; the root file kept its mode), the maca pod installed both SDK
  versions, and no container on the node restarted: not ours, not a bystander pod started before the install;
* cluster-operator is Ready: topo-worker published the node's topology, topo-master built the cluster view;
* a workload asking for ``metax-tech.com/gpu: 2`` with ``runtimeClassName: metax`` and ``METAX_MACA_VERSION``
  is placed by the real kube-scheduler through the extender (its ``/metrics`` counted the calls), runs with
  exactly its two GPUs' device nodes (CDI, from gpu-device's pod) and the SDK its prefix chose at ``/opt/maca``
  (the wrapper and the container-edit service), and a real Prometheus scraping the data-exporter's pod has both
  GPUs' series labelled with the workload's namespace, pod and container;
* the node switched to DRA (``metax-tech.com/gpu.allocation=dra``): gpu-device's pod leaves, the dra-driver's
  pod publishes the node's GPUs in a ResourceSlice, and a pod with a ResourceClaimTemplate for 2 GPUs runs with
  both devices;
* ``helm uninstall --wait`` runs the pre-delete Job as a real pod on the node, and afterwards nothing of ours
  is left: no objects, no pods, no ``metax-tech.com`` node labels or annotations, no host files the agents
  wrote; the container-runtime pod's uninstall gave the node's containerd its root file back byte for byte and
  mode for mode, and the running containerd has no ``metax`` handler; the bystander pod is still running.

The test payload's mx-smi is the fake host's (`metax_hw_fake.builder.portable_tool`, run by the image's own
Python on the fake host at the agent's ``METAX_HOST_ROOT``); with the test-only host path prefix the agents also
mount the fake host's state directory (`metax_core.cluster.host_paths.TEST_FAKE_HOST_DIR`). Not covered here
(docs/realnode.md "The product as real pods"): driver-manager's module tools run on this machine's own kernel
(``nsenter --target 1``), not the fake host's, so the payload is installed only when the host already runs its
version (``keep``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from metax_core.cluster import payloads, pod_security
from metax_core.cluster import workloads as rendered_workloads
from metax_core.dra import slices
from metax_core.node import allocation, payload_layout, readiness
from metax_core.runtime import containerd, handler
from metax_core.topology import cluster_view, extender
from metax_core.topology import document as topology_document
from metax_dev import registry as test_registry
from metax_dev.controlplane import cluster as controlplane
from metax_dev.productnode import helm_release, workloads
from metax_dev.productnode.helm_release import NAMESPACE, Release
from metax_dev.realnode import airgap, node
from metax_dev.realnode import containerd as containerd_layout
from metax_dev.release import bundle, publish
from metax_dev.release.target import Target
from metax_hw import cri_calls
from tests.realnode import gpus, pods
from tests.services.exporter.prometheus import Prometheus

pytestmark = pytest.mark.realnode

AGENTS = helm_release.AGENTS
DEPLOYMENTS = helm_release.DEPLOYMENTS
WAIT = 120.0
PREFIX = "metax-tech.com/"
SDK_VERSIONS = helm_release.SDK_VERSIONS
PROJECT = "metax"
"""The registry path's project: images at ``<host>/metax/<image>``, the chart at ``<host>/metax/charts``."""
BYSTANDER = "bystander"
"""A pod of someone else's on the node, started before the install: it must never restart because of us."""


@pytest.fixture(scope="module")
def mirrored(
    made_release: publish.Release, registry: test_registry.Registry, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Target, bundle.Mirrored]:
    """The release's air-gapped bundle loaded into the registry with ``./run mirror`` (issue 39 items 3 and 4)."""
    work = tmp_path_factory.mktemp("bundle")
    target = Target(
        f"{registry.host}/{PROJECT}", authfile=registry.auth_file(work / "auth.json"), cert_dir=registry.cert_dir
    )
    written = bundle.write(made_release, work / bundle.name(made_release.version))
    return target, bundle.mirror(written, target)


@pytest.fixture(scope="module")
def release(
    realnode_plane: controlplane.ControlPlane,
    registry: test_registry.Registry,
    mirrored: tuple[Target, bundle.Mirrored],
) -> Iterator[Release]:
    target, loaded = mirrored
    source = helm_release.pulled_from(target, loaded.version, registry.docker_config_json())
    api = realnode_plane.api_client()
    kube = client.CoreV1Api(api)
    with helm_release.real_node(
        realnode_plane,
        None,
        cpu_node=True,
        registry_hosts=registry.write_containerd_hosts,
        airgap_allowed=[registry.host],
    ) as r:
        r.extras["images before"] = _node_images(r)
        r.extras["pushed"] = loaded.served
        r.extras["registry"] = target.registry
        r.extras["version"] = loaded.version
        r.host_before = helm_release.host_files(r.fake.root)
        kube.create_namespaced_pod("default", pods.busybox_pod(BYSTANDER, r.node, "echo up; sleep 36000"))
        pods.wait_running(kube, "default", BYSTANDER)
        r.extras["bystander"] = _container(kube.read_namespaced_pod(BYSTANDER, "default"))
        r.extras["containerd before"] = r.member.containerd_pid()
        started = time.monotonic()
        r.create_pull_secret(source)
        try:
            r.helm(*r.install_args(source))
        except helm_release.ReleaseError as exc:  # say why: the pods, their events, the node's containerd
            containerd_log = r.member.log_tail("containerd", 40)
            raise helm_release.ReleaseError(f"{exc}\n{_describe(r)}\n--- containerd\n{containerd_log}") from exc
        r.timings["helm install --wait"] = time.monotonic() - started
        try:
            yield r
        finally:
            if helm_release.RELEASE in r.helm("list", "-n", NAMESPACE, "-q").stdout:
                r.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait", check=False)
            realnode_plane.restart_scheduler(())  # the session's scheduler as it was
            kube.delete_namespaced_pod(BYSTANDER, "default", grace_period_seconds=0)
            api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


def _node_images(r: Release) -> list[str]:
    """Every image reference the GPU node's containerd holds (namespace k8s.io)."""
    ctr = [str(r.member.bin_dir / "ctr"), "--address", str(r.member.containerd_socket), "-n", "k8s.io"]
    done = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


def _product_image(reference: str) -> str | None:
    """The product image a reference names (``…/metax-gpu-label:…`` → ``metax-gpu-label``), None for others'."""
    name = reference.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return name if name.startswith("metax-") else None


def _container(pod: Any) -> tuple[str, int]:
    """A pod's (only) container: its ID and restart count."""
    status = pod.status.container_statuses[0]
    return status.container_id, status.restart_count


def _pods(r: Release, name: str) -> list[dict[str, Any]]:
    """The live pods of workload ``name`` on the GPU node (gpu-discovery has one on the CPU node too)."""
    return [p for p in helm_release.component_pods(r, name) if p["spec"].get("nodeName") == r.node]


def _one(r: Release, name: str) -> dict[str, Any]:
    found = _pods(r, name)
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    return found[0]


def _exec(r: Release, pod: str, *command: str) -> str:
    done = r.kubectl("exec", "-n", NAMESPACE, pod, "--", *command)
    assert done.returncode == 0, f"{' '.join(command)} in {pod}: {done.stderr}"
    return done.stdout


def _oci_spec(r: Release, container_id: str, member: node.RealNode | None = None) -> dict[str, Any]:
    """The OCI runtime spec a node's containerd (the GPU node's by default) ran a container with (``ctr containers
    info``)."""
    member = member or r.member
    ctr = [str(member.bin_dir / "ctr"), "--address", str(member.containerd_socket), "-n", "k8s.io"]
    done = subprocess.run(
        [*ctr, "containers", "info", container_id.removeprefix("containerd://")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    spec: dict[str, Any] = json.loads(done.stdout)["Spec"]
    return spec


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
    assert status["ready"] and status["imageID"].endswith("@" + r.extras["pushed"]["metax-operator"])
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


def test_every_product_image_was_pulled_from_the_registry_by_its_pushed_digest(release: Release) -> None:
    """Issue 39 item 3: installed from ``oci://`` in the test registry, on nodes whose containerd had none of the
    product's images, every container of ours runs ``<registry>/<image>:<version>@<digest>`` and the node pulled
    exactly the digest the release pushed (the pod's ``imageID``, what containerd resolved)."""
    r = release
    registry, pushed = r.extras["registry"], r.extras["pushed"]
    assert not [i for i in r.extras["images before"] if _product_image(i)], r.extras["images before"]

    running = {"metax-operator", *AGENTS, *DEPLOYMENTS}

    def resolved() -> list[dict[str, Any]]:
        """Our pods once every component's pod is there, Ready, and every container of theirs has run (its imageID:
        what containerd resolved and ran): after ``helm install --wait`` the operator is Ready and only then creates
        the others, which pull their images; container-runtime is Ready once it restarted the node's containerd."""
        found = helm_release.pods(r)
        images = {_product_image(c["image"]) for p in found for c in p["spec"]["containers"]}
        statuses = [
            s
            for p in found
            for s in [*p["status"].get("initContainerStatuses", []), *p["status"].get("containerStatuses", [])]
        ]
        ready = all(s.get("ready") for p in found for s in p["status"].get("containerStatuses") or [{}])
        return found if running <= images and ready and all(s.get("imageID") for s in statuses) else []

    seen = set()
    for pod in helm_release.wait(resolved, "every container of ours started", WAIT, lambda: _describe(r)):
        spec_containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
        statuses = [*pod["status"].get("initContainerStatuses", []), *pod["status"].get("containerStatuses", [])]
        for container, status in zip(spec_containers, statuses, strict=True):
            name = _product_image(container["image"])
            if name is None:
                continue  # the TEST payload images (the vendor's), imported
            seen.add(name)
            version = r.extras["version"]
            assert container["image"] == f"{registry}/{name}:{version}@{pushed[name]}", container["image"]
            assert status["imageID"] == f"{registry}/{name}@{pushed[name]}", (pod["metadata"]["name"], status)
    assert running <= seen, sorted(running - seen)
    pulled = {i.split("@")[1] for i in _node_images(r) if _product_image(i) and "@" in i}
    assert pulled <= set(pushed.values()) and pulled


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
    assert rendered["metax-container-runtime"]["status"]["desiredNumberScheduled"] == 1
    gpus = sorted(str(a) for a in r.fake.gpu_addresses())
    for name in AGENTS:
        pod = _one(r, name)
        spec = rendered[name]["spec"]["template"]["spec"]
        container = pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["imageID"].endswith("@" + r.extras["pushed"][name])
        assert container["securityContext"] == spec["containers"][0]["securityContext"]
        privileged = name != helm_release.DISCOVERY  # issue 38 item 3: the one unprivileged node agent
        assert container["securityContext"].get("privileged", False) is privileged
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                assert volume["hostPath"]["path"].startswith(str(r.fake.root) + "/")
        # Privileged: every capability (gpu-discovery: none); the fake host's PCI functions under /host/sys.
        status = _exec(r, pod["metadata"]["name"], "cat", "/proc/self/status")
        cap_eff = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
        ours = int(Path("/proc/self/status").read_text().split("CapEff:")[1].split()[0], 16)
        assert int(cap_eff, 16) == (ours if privileged else 0), name
        touched = r.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", "touch", "/probe")
        assert touched.returncode != 0 and "Read-only file system" in touched.stderr, name
        if any(m["mountPath"] == "/host/sys" for m in container.get("volumeMounts", [])):
            listed = _exec(r, pod["metadata"]["name"], "ls", "/host/sys/bus/pci/devices").split()
            assert set(gpus) <= set(listed)
    driver = _one(r, "metax-driver")
    init = driver["status"]["initContainerStatuses"][0]
    assert init["image"] == helm_release.PAYLOAD_IMAGE and init["state"]["terminated"]["exitCode"] == 0
    # The vendor's payload ran with no credentials and no capability (issue 38 item 2, R-NODEBOUND): its OCI spec as
    # the node's containerd ran it; the agent container of the same pod holds the token and reaches the API.
    oci = _oci_spec(r, init["containerID"])
    assert not [m for m in oci["mounts"] if m["destination"].startswith(pod_security.TOKEN_PATH)], oci["mounts"]
    assert not any(oci["process"].get("capabilities", {}).get(kind) for kind in ("bounding", "effective", "permitted"))
    assert oci["process"]["noNewPrivileges"] is True and oci["root"].get("readonly") is True
    assert _exec(r, driver["metadata"]["name"], "cat", pod_security.TOKEN_PATH + "/namespace") == NAMESPACE
    listed = _exec(r, driver["metadata"]["name"], "ls", payloads.PAYLOAD_DIR + "/driver")
    assert listed.split() == ["metax.ko"]

    labels = kube.read_node(r.node).metadata.labels or {}
    assert labels.get(rendered_workloads.GPU_NODE_LABEL) == "true"
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


def test_a_node_without_gpus_runs_only_unprivileged_discovery_and_gets_no_label(
    release: Release, kube: client.CoreV1Api
) -> None:
    """Issue 38 item 3 (R-SECURITY, 000 §1.3.4): the release's CPU node, a real node on a fake host without GPUs,
    runs gpu-discovery's pod and nothing else of ours. Its container runs as the images' user with no capability,
    no privilege escalation and a read-only root — read from the OCI spec the node's containerd ran it with, not
    only from what the pod asks —, its one host path ``/sys`` read-only, and it labels nothing; no privileged
    DaemonSet (gpu-label's included) places a pod there."""
    r = release
    cpu = r.cpu
    assert cpu is not None

    def discovered() -> dict[str, Any] | None:
        found = [
            p for p in helm_release.component_pods(r, helm_release.DISCOVERY) if p["spec"].get("nodeName") == cpu.name
        ]
        statuses = [s for p in found for s in (p.get("status") or {}).get("containerStatuses") or []]
        return found[0] if len(found) == 1 and statuses and all(s["ready"] for s in statuses) else None

    pod = helm_release.wait(discovered, "gpu-discovery Ready on the CPU node", WAIT, lambda: _describe(r))
    on_cpu = [p["metadata"]["name"] for p in helm_release.pods(r) if p["spec"].get("nodeName") == cpu.name]
    assert on_cpu == [pod["metadata"]["name"]]
    discovery = r.extras["pushed"][helm_release.DISCOVERY]
    assert pod["status"]["containerStatuses"][0]["imageID"].endswith("@" + discovery)
    oci = _oci_spec(r, pod["status"]["containerStatuses"][0]["containerID"], cpu)
    user = oci["process"]["user"]
    assert (user["uid"], user["gid"]) == (pod_security.UNPRIVILEGED_USER, pod_security.UNPRIVILEGED_USER)
    assert not any(oci["process"].get("capabilities", {}).get(kind) for kind in ("bounding", "effective", "permitted"))
    assert oci["process"]["noNewPrivileges"] is True and oci["root"].get("readonly") is True
    [sys_mount] = [m for m in oci["mounts"] if m["destination"].startswith("/host")]
    assert sys_mount["destination"] == "/host/sys" and "ro" in sys_mount["options"]
    # it looked (its readiness: the labels published) and found nothing: no label of ours on the node
    labels = kube.read_node(cpu.name).metadata.labels or {}
    assert not [k for k in labels if k.startswith(PREFIX)], labels
    log = r.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout
    assert "no MetaX GPU on this node" in log, log[-2000:]


def test_container_runtime_and_maca_configure_the_node_from_their_pods(
    release: Release, kube: client.CoreV1Api
) -> None:
    """The path every administrator takes (issue 37 item 4): the container-runtime pod edits the node's root file
    through its hostPath, dry-runs it with the node's own containerd (in the daemon's namespaces, from its pod) and
    restarts containerd by signal; its supervisor starts it again with the handler; the maca pod installs both SDK
    versions and serves the container-edit socket the wrapper dials. Every container on the node, ours and the
    bystander's, is the same container afterwards, never restarted."""
    r = release
    for name in ("metax-container-runtime", "metax-maca"):
        helm_release.wait(
            lambda name=name: (
                all(  # type: ignore[misc]
                    s.get("ready") for p in _pods(r, name) for s in (p["status"].get("containerStatuses") or [{}])
                )
                and _pods(r, name)
            ),
            f"{name}'s pod Ready",
            WAIT,
            lambda: _describe(r),
        )
    after = r.member.containerd_pid()
    assert after is not None and after != r.extras["containerd before"]  # restarted once, by its supervisor
    loaded = cri_calls.cri_status_config(str(r.member.containerd_socket))
    metax = loaded["containerd"]["runtimes"][handler.RUNTIME_HANDLER]
    assert metax["options"]["BinaryName"] == handler.WRAPPER_HOST_PATH
    imports = tomlkit.parse(r.member.containerd_layout.config.read_text())["imports"]
    assert list(imports)[-1] == containerd.dropin_path(containerd_layout.NAMESPACE_CONFIG, 3)  # the agent's host path
    assert r.runtime_config()[1] == r.runtime_before[1]  # the root file kept its mode
    installed = sorted(p.name for p in (r.fake.root / "var/lib/metax/maca").iterdir() if p.name[0].isdigit())
    assert installed == sorted(SDK_VERSIONS)
    assert (r.fake.root / "run/metax/container-edit.sock").is_socket()
    runtime_pod = _one(r, "metax-container-runtime")
    log = r.kubectl("logs", "-n", NAMESPACE, runtime_pod["metadata"]["name"]).stdout
    assert "sending SIGTERM to" in log, log[-3000:]
    ours = {
        r.node,
        r.cpu.name if r.cpu else r.node,
    }  # Events about other nodes of the session (the demo's) stay an hour
    events = [e for e in kube.list_namespaced_event("default").items if e.reason == "RuntimeConfigured"]
    assert [e.involved_object.name for e in events if e.involved_object.name in ours] == [r.node]
    restarted = {
        pod["metadata"]["name"]: (
            status.get("lastState"),
            r.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", status["name"], "--previous").stdout[
                -2000:
            ],
        )
        for pod in helm_release.pods(r)
        for status in pod["status"].get("containerStatuses") or []
        if status["restartCount"] != 0
    }
    assert restarted == {}
    assert _container(kube.read_namespaced_pod(BYSTANDER, "default")) == r.extras["bystander"]


def test_the_cluster_operator_is_ready_with_topology_and_the_scheduler(
    release: Release, kube: client.CoreV1Api
) -> None:
    """Every component deployed and Ready: topo-worker published the node's
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


def _metrics(url: str) -> dict[str, list[Any]]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def _extender_calls(url: str) -> dict[str, float]:
    samples = _metrics(url).get(extender.REQUESTS_METRIC, [])
    return {
        s.labels["verb"]: s.value for s in samples if s.name.endswith("_total") and s.labels["outcome"] == "answered"
    }


def test_a_workload_with_two_gpus_and_an_sdk_prefix_is_placed_runs_and_is_scraped(
    release: Release,
    kube: client.CoreV1Api,
    namespace: str,
    realnode_plane: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
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
    device_pod = _one(r, "metax-gpu-device")["metadata"]["name"]
    listed = _exec(r, device_pod, "/host" + payload_layout.HOST_TOOLS_DIR + "/mx-smi", "-L")
    assert len([line for line in listed.splitlines() if line.startswith("GPU")]) == helm_release.PFS, listed

    # The administrator wires the extender into the scheduler (docs/scheduler.md). Its pod's address: this
    # harness has no kube-proxy to translate the Service's ClusterIP for a scheduler on the host's network.
    scheduler_pod = _one(r, "metax-gpu-scheduler")
    base = f"http://{scheduler_pod['status']['podIP']}:{extender.PORT}"
    realnode_plane.restart_scheduler([extender.scheduler_extender(base, timeout_seconds=2)])
    calls_before = _extender_calls(base + extender.METRICS_PATH)

    script = (
        'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; echo "RESOLVED=$METAX_MACA_RESOLVED"; maca-version; '
        + gpus.LIST_DEVICES
        + "touch /opt/maca/x 2>&1 | sed 's/^/TOUCH /'; echo DONE; sleep 3600"
    )
    pod = pods.scheduled_pod("two-gpus", r.node, script, {gpus.GPU: "2"})
    pod["spec"]["runtimeClassName"] = handler.RUNTIME_HANDLER  # the operator's RuntimeClass
    pod["spec"]["containers"][0]["env"] = [{"name": "METAX_MACA_VERSION", "value": "maca-2.18"}]
    kube.create_namespaced_pod(namespace, pod)
    text = pods.wait_logs(kube, namespace, "two-gpus", "DONE")

    # placed by kube-scheduler through the extender (binding stays the scheduler's)
    assert kube.read_namespaced_pod("two-gpus", namespace).spec.node_name == r.node
    calls = _extender_calls(base + extender.METRICS_PATH)
    # filter only: with one feasible node kube-scheduler skips scoring (tests/integration/scheduler ranks nodes)
    assert calls.get("filter", 0) > calls_before.get("filter", 0), (calls_before, calls)
    # its two GPUs, injected by containerd from the CDI spec gpu-device's pod wrote
    visible = sorted(gpus.env_value(text, "VISIBLE").split(","))
    assert visible == sorted(str(a) for a in r.fake.gpu_addresses())
    seen = gpus.device_lines(text)
    assert set(seen) == gpus.expected_nodes(r.fake, visible), seen
    # the SDK its prefix chose, read-only, from the wrapper and the maca agent's container-edit service
    assert "MXMACA 2.18.0.3" in text.splitlines() and "RESOLVED=2.18.0.3" in text, text
    assert "Read-only file system" in text, text

    # A real Prometheus scrapes the data-exporter's pod: both GPUs' series carry the workload's pod (R-EXPORTER).
    exporter_pod = _one(r, "metax-data-exporter")
    prometheus = Prometheus(tmp_path, f"{exporter_pod['status']['podIP']}:{rendered_workloads.EXPORTER_PORT}")
    try:
        helm_release.wait(prometheus.ready, "prometheus ready", 60, lambda: "")
        query = f'mx_gpu_usage{{pod="two-gpus", namespace="{namespace}"}}'
        held = helm_release.wait(
            lambda: (found := prometheus.query(query)) and len(found) == len(visible) and found,
            "both GPUs' series scraped with the pod's labels",
            WAIT,
            lambda: _describe(r),
        )
    finally:
        prometheus.stop()
    assert sorted(series["metric"]["pci_address"] for series in held) == visible
    assert {series["metric"]["container"] for series in held} == {"main"}


def test_a_dra_node_serves_a_claimed_pod(release: Release, kube: client.CoreV1Api, namespace: str) -> None:
    """The administrator moves the node to DRA (R-DRA): the dra-driver's pod replaces gpu-device's, publishes
    the GPUs, and a pod with a ResourceClaimTemplate for both runs with them."""
    r = release
    custom = client.CustomObjectsApi(kube.api_client)
    kube.patch_node(r.node, {"metadata": {"labels": {allocation.LABEL: allocation.Allocator.DRA.value}}})
    try:
        helm_release.wait(
            lambda: (
                not _pods(r, "metax-gpu-device")
                and len(found := _pods(r, "metax-dra-driver")) == 1
                and (found[0]["status"].get("containerStatuses") or [{}])[0].get("ready")
            ),
            "gpu-device's pod gone and the dra-driver's Ready",
            WAIT,
            lambda: _describe(r),
        )

        def published() -> dict[str, Any]:
            items = custom.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={r.node}"
            )["items"]
            found = slices.published_in(items, r.node)
            return found if len(found) == helm_release.PFS else {}

        helm_release.wait(published, "the node's GPUs in a ResourceSlice", WAIT, lambda: _describe(r))
        cdi_dir = r.fake.root / "var/run/cdi"
        specs_before = set(cdi_dir.iterdir())
        template = workloads.claim_template("two-gpus", 2)
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaimtemplates", template)
        pod = workloads.claimed_pod("claimed", r.node, gpus.LIST_DEVICES + "echo DONE; sleep 3600", "two-gpus")
        kube.create_namespaced_pod(namespace, pod)
        text = pods.wait_logs(kube, namespace, "claimed", "DONE")
        every = sorted(str(a) for a in r.fake.gpu_addresses())
        assert set(gpus.device_lines(text)) == gpus.expected_nodes(r.fake, every), text
        assert len(set(cdi_dir.iterdir()) - specs_before) == 1  # the claim's own CDI spec
        # Drained before the switch back (docs/dra.md): the pod gone and its claim unprepared by the dra-driver's
        # pod (its CDI spec removed), since the driver leaves the node with the label.
        kube.delete_namespaced_pod("claimed", namespace)
        pods.wait(lambda: not kube.list_namespaced_pod(namespace).items, "the claimed pod gone", timeout=60)
        helm_release.wait(
            lambda: set(cdi_dir.iterdir()) == specs_before, "the claim unprepared", WAIT, lambda: _describe(r)
        )
    finally:
        kube.patch_node(r.node, {"metadata": {"labels": {allocation.LABEL: None}}})  # the administrator's label


def test_uninstall_runs_the_pre_delete_job_as_a_real_pod_and_leaves_nothing(
    release: Release, kube: client.CoreV1Api, record_timing: Callable[[str, float], None]
) -> None:
    r = release
    for what, seconds in r.timings.items():
        record_timing(f"e2e: {what}", seconds)
    # The GPU workloads are gone before the uninstall, as an administrator removes them first (`metax_sandboxes`).
    helm_release.wait(
        lambda: not r.metax_sandboxes(),
        "the GPU workloads' sandboxes removed by the kubelet",
        WAIT,
        lambda: _describe(r),
    )
    started = time.monotonic()
    r.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait")
    record_timing("e2e: helm uninstall --wait", time.monotonic() - started)
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
    record_timing("e2e: helm uninstall to every pod gone", time.monotonic() - started)
    for kind in ("daemonsets", "deployments", "jobs", "services", "secrets"):
        left = json.loads(r.kubectl("get", kind, "-n", NAMESPACE, "-o", "json").stdout)["items"]
        # The pull secret is the administrator's, made before the install (`Release.create_pull_secret`).
        ours = [o["metadata"]["name"] for o in left if o["metadata"]["name"] != helm_release.PULL_SECRET]
        assert ours == [], (kind, ours)
    config_maps = json.loads(r.kubectl("get", "configmaps", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [c["metadata"]["name"] for c in config_maps] == ["kube-root-ca.crt"]
    accounts = json.loads(r.kubectl("get", "serviceaccounts", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert [a["metadata"]["name"] for a in accounts] == ["default"]
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations"):
        names = [o["metadata"]["name"] for o in json.loads(r.kubectl("get", kind, "-o", "json").stdout)["items"]]
        assert not [n for n in names if n.startswith("metax")], (kind, names)
    operators = r.kubectl("get", "clusteroperators", "-o", "json")
    assert operators.returncode == 0 and json.loads(operators.stdout)["items"] == []
    for name in (r.node, r.cpu.name if r.cpu else r.node):
        meta = kube.read_node(name).metadata
        assert not [k for k in {**(meta.labels or {}), **(meta.annotations or {})} if k.startswith(PREFIX)], name
    assert helm_release.host_files(r.fake.root) == r.host_before
    # the container-runtime pod's uninstall gave the node's containerd its root file back, byte and mode, and
    # restarted it without the handler; nobody else's container restarted
    assert r.runtime_config() == r.runtime_before
    assert not (r.fake.root / "etc/containerd/conf.d").exists()
    loaded = cri_calls.cri_status_config(str(r.member.containerd_socket))
    assert handler.RUNTIME_HANDLER not in loaded["containerd"]["runtimes"]
    assert _container(kube.read_namespaced_pod(BYSTANDER, "default")) == r.extras["bystander"]


def test_the_air_gapped_nodes_reached_for_nothing_but_the_registry_and_the_api_server(release: Release) -> None:
    """Issue 39 item 4: from the first start of their containerd through install, every test above and uninstall,
    neither node's processes (containerd, kubelet, shims, our hostPID pods' programs) nor any pod on them opened a
    connection to anything but the test registry, the API server (and its Service address), the node's own
    containerd stream server and its own pods: their fences (`metax_dev.realnode.airgap`) dropped 0 packets.
    Then the fences are shown to be live: reaching for a TEST-NET address from the node and from a pod on it is
    dropped and counted (else the 0 proves nothing)."""
    r = release
    members = [r.member, *([r.cpu] if r.cpu else [])]
    assert {m.name: m.airgap_dropped() for m in members} == {m.name: 0 for m in members}
    assert len(airgap.host_state()) >= 3 * len(members)  # each node's chain and its two jumps: the fences are up
    r.member.airgap_probe()
    from_node = r.member.airgap_dropped()
    assert from_node > 0
    # busybox's nc (its static wget crashes resolving even an address)
    reached = r.kubectl("exec", "-n", "default", BYSTANDER, "--", "nc", "-w", "2", airgap.PROBE_ADDRESS, "443")
    assert reached.returncode != 0, reached.stdout
    assert r.member.airgap_dropped() > from_node
