"""The dra-driver on a real node (R-DRA): the real kubelet 1.36 + containerd 2.4, and the real kube-scheduler and
kube-controller-manager of the test control plane allocate MetaX GPUs through ResourceClaims. No fake DRA anything.

On a node of its own (a fake MetaX host with 4 GPUs, two under each of two PCIe root complexes, device nodes
real character devices), with the project's DeviceClasses:

* the driver registers with the kubelet and publishes one ResourceSlice pool with the 4 GPUs and their
  attributes;
* a pod with a ResourceClaimTemplate for 2 GPUs under ``matchAttribute: resource.kubernetes.io/pcieRoot`` and
  ``macaVersion`` configuration runs with exactly those 2 devices (CDI), both under one root, and sees the SDK
  version the prefix resolves to; deleting it unprepares the claim (its CDI spec gone) and frees it;
* a claim shared by two pods: both run with the same devices; a claim for more GPUs than the node has stays
  pending with the scheduler's reason;
* the kubelet restarting: the driver is registered again and a prepared claim is intact (its pod keeps running,
  a new pod is prepared); the driver killed (SIGKILL) while a claim waits: restarted, it converges and the pod runs;
* a GPU held by a claim falling off the bus is reported unhealthy through the health stream
  (``allocatedResourcesStatus`` in the pod's status) and its device tainted ``FellOffBus``;
* a GPU whose mx-smi state turns bad: its device carries the taint ``metax-tech.com/gpu-health=StateFault:NoSchedule``
  (the API server stamps ``timeAdded``, and the driver writes no slice while nothing changes), a claim for every
  GPU of the node stays unallocated with the scheduler's reason; the state back to normal, the taint goes within
  two readings and the pod runs, the driver never restarted (R-HEALTH);
* a pod asking ``limits: metax-tech.com/gpu: 1`` on this node is served by DRA (DRAExtendedResource).
* a claim whose configuration has a bad ``macaVersion`` is refused in the pod's events naming the field
  (``status.allocation.devices.config[0].opaque.parameters.macaVersion``) and what is allowed; the pod waits.

The driver runs as a host process in the node's namespace on the fake host (the fake host's mx-smi is a
script on the test machine's PATH, which a container cannot run): the same composition root as the image's.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from metax_core.cluster import dra_objects
from metax_core.dra import DRIVER, claims, prepare, slices
from metax_core.node import readiness
from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import errors, processes
from metax_dev.realnode import devnodes, images, launcher, node
from metax_hw import hostfiles
from metax_hw_fake import builder, host
from services.dra_driver import config as dra_config
from tests.support.real_node import AGENT_ENV

from . import gpus, pods

pytestmark = pytest.mark.realnode

GROUP, VERSION = "resource.k8s.io", "v1"
SDKS = ("2.18.0.3", "2.18.1.0", "2.19.0.0")
SCRIPT = gpus.LIST_DEVICES + "env; ls /opt/maca 2>/dev/null | sed 's/^/SDK /'; sleep 3600"


def dra_classes() -> list[dict[str, Any]]:
    """The DeviceClasses exactly as the operator renders them (docs/dra.md)."""
    return dra_objects.device_classes()


@attrs.define
class DraNode:
    real: node.RealNode
    fake: host.FakeHost
    env: dict[str, str]
    driver: processes.Process | None = None

    def start_driver(self) -> processes.Process:
        self.driver = self.real.spawn("dra-driver", [sys.executable, "-m", "services.dra_driver"], self.env)
        return self.driver

    @property
    def settings(self) -> dra_config.Settings:
        return dra_config.from_env(self.env)

    def log(self) -> str:
        return self.real.log_tail("dra-driver", 80) + "\n--- kubelet:\n" + self.real.log_tail("kubelet", 40)


@pytest.fixture(scope="module")
def dra_node(realnode_plane: controlplane.ControlPlane) -> Iterator[DraNode]:
    work = Path(tempfile.mkdtemp(prefix="metax-dranode-"))
    nodes = launcher.RealNodes(realnode_plane, 0, prefix="dra-node")
    fake = builder.FakeHostBuilder().gpus(4, numa_nodes=2, switches=0).host_driver("2.18.0").build(work / "host")
    devnodes.make_device_nodes_real(fake.root)
    for version in SDKS:  # what the maca agent would have installed
        (fake.root / "var/lib/metax/maca" / version / "bin").mkdir(parents=True)
    member: DraNode | None = None
    custom = client.CustomObjectsApi(realnode_plane.api_client())
    for body in dra_classes():
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
    try:
        nodes.start()
        real = nodes.add_node(device_root=fake.root)
        board = hostfiles.FileReadinessBoard(fake.root)
        required = dra_config.from_env({"NODE_NAME": real.name}).required_components
        for component in required:
            board.publish(readiness.ComponentReadiness(component, True, "test: ready"))
        env = {
            **AGENT_ENV,
            "NODE_NAME": real.name,
            "METAX_HOST_ROOT": str(fake.root),
            "METAX_KUBELET_DIR": str(real.kubelet_layout.root_dir),
            "METAX_POD_RESOURCES_SOCKET": str(real.pod_resources_socket),
            "METAX_MACA_RUNTIME_DIR": str(fake.root / "var/lib/metax/maca"),
            "KUBECONFIG": str(realnode_plane.kubeconfig_path),
            "PATH": fake.env()["PATH"],
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        member = DraNode(real, fake, env)
        member.start_driver()
        yield member
    except errors.ControlPlaneError as exc:
        pytest.fail(f"real node failed to start: {exc}", pytrace=False)
    finally:
        if member is not None and member.driver is not None:
            member.driver.stop()
        nodes.stop()
        for body in dra_classes():
            custom.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", body["metadata"]["name"])
        custom.api_client.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def custom(realnode_plane: controlplane.ControlPlane) -> Iterator[client.CustomObjectsApi]:
    api = realnode_plane.api_client()
    try:
        yield client.CustomObjectsApi(api)
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


def node_slices(custom: client.CustomObjectsApi, node_name: str) -> list[dict[str, Any]]:
    found = custom.list_cluster_custom_object(
        GROUP, VERSION, "resourceslices", field_selector=f"spec.nodeName={node_name}"
    )
    return list(found["items"])


def published(custom: client.CustomObjectsApi, dra: DraNode) -> dict[str, Any]:
    return slices.published_in(node_slices(custom, dra.real.name), dra.real.name)


def wait_published(custom: client.CustomObjectsApi, dra: DraNode, count: int = 4) -> dict[str, Any]:
    return pods.wait(
        lambda: (found := published(custom, dra)) and len(found) == count and found,
        f"{count} devices published by {dra.real.name}",
        explain=dra.log,
    )


def untainted(custom: client.CustomObjectsApi, dra: DraNode) -> bool:
    found = published(custom, dra)
    return len(found) == len(dra.fake.gpu_addresses()) and not any(d.get("taints") for d in found.values())


def wait_untainted(custom: client.CustomObjectsApi, dra: DraNode, timeout: float = 90.0) -> None:
    pods.wait(lambda: untainted(custom, dra), "every device published untainted", timeout=timeout, explain=dra.log)


def ours(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A device's taints without the server's ``timeAdded``."""
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]


def gpu_config(**fields: object) -> dict[str, Any]:
    return {
        "requests": ["gpus"],
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": claims.CONFIG_API_VERSION, "kind": claims.CONFIG_KIND, **fields},
        },
    }


def claim_spec(count: int, *, same_root: bool = True, **config: object) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [
            {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}}
        ]
    }
    if same_root:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": slices.PCIE_ROOT_ATTRIBUTE}]
    if config:
        devices["config"] = [gpu_config(**config)]
    return {"devices": devices}


def claim_pod(name: str, dra: DraNode, claim: dict[str, str]) -> dict[str, Any]:
    pod = pods.busybox_pod(name, dra.real.name, SCRIPT)
    del pod["spec"]["nodeName"]  # the scheduler allocates the claim
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": dra.real.name}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", **claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return pod


def pod_claim(kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, pod: str) -> dict[str, Any]:
    """The pod's one claim: named in its spec, or generated from its template (named in its status)."""
    found = kube.read_namespaced_pod(pod, namespace)
    (claim,) = found.spec.resource_claims
    name = claim.resource_claim_name
    if name is None:
        (status,) = found.status.resource_claim_statuses or []
        name = status.resource_claim_name
    return dict(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name))


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return sorted(r["device"] for r in results)


def addresses_seen(logs: str) -> list[str]:
    return sorted(gpus.env_value(logs, "METAX_VISIBLE_DEVICES").split(","))


def claim_spec_file(dra: DraNode, uid: str) -> Path:
    return dra.fake.root / "var/run/cdi" / prepare.spec_file_name(uid)


def registered(dra: DraNode) -> bool:
    return "registered with the kubelet" in dra.real.log_path("dra-driver").read_text()


def test_the_driver_registers_and_publishes_the_nodes_gpus(custom: client.CustomObjectsApi, dra_node: DraNode) -> None:
    found = wait_published(custom, dra_node)
    expected = {slices.device_name(a): a for a in dra_node.fake.gpu_addresses()}
    assert set(found) == set(expected)
    roots = {name: d["attributes"][slices.PCIE_ROOT_ATTRIBUTE]["string"] for name, d in found.items()}
    assert len(set(roots.values())) == 2, roots  # two root complexes, two GPUs each
    (pool,) = {json.dumps(s["spec"]["pool"], sort_keys=True) for s in node_slices(custom, dra_node.real.name)}
    assert json.loads(pool)["name"] == dra_node.real.name
    pods.wait(lambda: registered(dra_node), "the kubelet's registration of the DRA driver", explain=dra_node.log)


def test_a_claim_for_two_gpus_under_one_root_runs_with_exactly_those(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    template = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus"},
        "spec": {"spec": claim_spec(2, macaVersion="maca-2.18")},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates", template)
    kube.create_namespaced_pod(namespace, claim_pod("train", dra_node, {"resourceClaimTemplateName": "two-gpus"}))
    pods.wait_running(kube, namespace, "train")
    claim = pod_claim(kube, custom, namespace, "train")
    devices = allocated_devices(claim)
    assert len(devices) == 2
    found = published(custom, dra_node)
    assert len({found[d]["attributes"][slices.PCIE_ROOT_ATTRIBUTE]["string"] for d in devices}) == 1
    addresses = sorted(found[d]["attributes"][slices.PCI_BUS_ID_ATTRIBUTE]["string"] for d in devices)
    logs = pods.wait(
        lambda: (text := pods.logs(kube, namespace, "train")) and "SDK " in text and text, "the pod's output"
    )
    assert addresses_seen(logs) == addresses
    assert set(gpus.device_lines(logs)) == gpus.expected_nodes(dra_node.fake, addresses)
    assert gpus.env_value(logs, "METAX_MACA_RESOLVED") == "2.18.1.0"  # the newest 2.18
    assert "SDK bin" in logs
    uid = claim["metadata"]["uid"]
    assert claim_spec_file(dra_node, uid).is_file()
    kube.delete_namespaced_pod("train", namespace, grace_period_seconds=0)
    pods.wait(lambda: not claim_spec_file(dra_node, uid).exists(), "the claim unprepared", explain=dra_node.log)
    pods.wait(
        lambda: not _exists(custom, namespace, claim["metadata"]["name"]), "the template's claim deleted with its pod"
    )


def _exists(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    try:
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _claim(custom: client.CustomObjectsApi, namespace: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", body)


def test_a_shared_claim_serves_two_pods_and_an_impossible_one_stays_pending(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    _claim(custom, namespace, "shared", claim_spec(1, same_root=False))
    for name in ("reader-a", "reader-b"):
        kube.create_namespaced_pod(namespace, claim_pod(name, dra_node, {"resourceClaimName": "shared"}))
    for name in ("reader-a", "reader-b"):
        pods.wait_running(kube, namespace, name)
    seen = [
        addresses_seen(pods.wait(lambda n=name: pods.logs(kube, namespace, n), f"{name}'s output"))
        for name in ("reader-a", "reader-b")
    ]
    assert seen[0] == seen[1] and len(seen[0]) == 1
    _claim(custom, namespace, "too-many", claim_spec(5, same_root=False))
    kube.create_namespaced_pod(namespace, claim_pod("greedy", dra_node, {"resourceClaimName": "too-many"}))
    reason = pods.wait(lambda: gpus.unschedulable(kube, namespace, "greedy"), "the scheduler's reason")
    assert "claim" in reason.lower() or "resource" in reason.lower(), reason


def test_kubelet_restart_keeps_prepared_claims_and_the_driver_registers_again(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    _claim(custom, namespace, "before", claim_spec(1, same_root=False))
    kube.create_namespaced_pod(namespace, claim_pod("before", dra_node, {"resourceClaimName": "before"}))
    pods.wait_running(kube, namespace, "before")
    uid = pod_claim(kube, custom, namespace, "before")["metadata"]["uid"]
    marks = dra_node.real.log_path("dra-driver").read_text().count("registered with the kubelet")
    dra_node.real.restart_kubelet()
    pods.wait(
        lambda: dra_node.real.log_path("dra-driver").read_text().count("registered with the kubelet") > marks,
        "the driver registered again after the kubelet's restart",
        explain=dra_node.log,
    )
    assert claim_spec_file(dra_node, uid).is_file()
    assert pods.phase(kube, namespace, "before") == "Running"
    _claim(custom, namespace, "after", claim_spec(1, same_root=False))
    kube.create_namespaced_pod(namespace, claim_pod("after", dra_node, {"resourceClaimName": "after"}))
    pods.wait_running(kube, namespace, "after")


def test_a_killed_driver_converges_when_it_is_back(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    driver = dra_node.driver
    assert driver is not None and driver.popen is not None
    driver._signal_group(signal.SIGKILL)  # its own session: the whole process group, no chance to clean up
    driver.wait_stopped(30)
    _claim(custom, namespace, "waiting", claim_spec(1, same_root=False))
    kube.create_namespaced_pod(namespace, claim_pod("waiting", dra_node, {"resourceClaimName": "waiting"}))
    pods.wait(
        lambda: (
            any(e.reason == "FailedPrepareDynamicResources" for e in kube.list_namespaced_event(namespace).items)
            or pods.phase(kube, namespace, "waiting") == "Pending"
        ),
        "the pod waiting for its claim",
    )
    assert pods.phase(kube, namespace, "waiting") != "Running"
    dra_node.start_driver()  # its stale sockets are replaced, its checkpoint read
    pods.wait_running(kube, namespace, "waiting")


def test_a_gpu_falling_off_the_bus_is_reported_unhealthy_in_the_pods_status(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    _claim(custom, namespace, "fragile", claim_spec(1, same_root=False))
    kube.create_namespaced_pod(namespace, claim_pod("fragile", dra_node, {"resourceClaimName": "fragile"}))
    pods.wait_running(kube, namespace, "fragile")
    (device,) = allocated_devices(pod_claim(kube, custom, namespace, "fragile"))
    address = published(custom, dra_node)[device]["attributes"][slices.PCI_BUS_ID_ATTRIBUTE]["string"]
    try:
        dra_node.fake.fall_off_bus(address)

        def health() -> str:
            # The raw pod: allocatedResourcesStatus is newer than the client's models.
            raw = json.loads(kube.read_namespaced_pod("fragile", namespace, _preload_content=False).data)
            for status in (raw.get("status") or {}).get("containerStatuses") or []:
                for resource in status.get("allocatedResourcesStatus") or []:
                    for entry in resource.get("resources") or []:
                        if device in entry.get("resourceID", "") and entry.get("health") == "Unhealthy":
                            return str(entry)
            return ""

        pods.wait(health, "the pod's status saying its GPU is unhealthy", explain=dra_node.log)
        taints = pods.wait(
            lambda: published(custom, dra_node)[device].get("taints"), "its device tainted", explain=dra_node.log
        )
        assert ours(taints) == [{"key": slices.TAINT_KEY, "value": "FellOffBus", "effect": "NoSchedule"}]
    finally:
        dra_node.fake.clear_faults()
        devnodes.make_device_nodes_real(dra_node.fake.root)
    wait_untainted(custom, dra_node)


def test_a_faulty_gpu_is_tainted_and_a_claim_for_every_gpu_runs_once_the_fault_clears(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_untainted(custom, dra_node)
    count = len(dra_node.fake.gpu_addresses())  # every GPU of the bed (4)
    bad = dra_node.fake.gpu_addresses()[-1]
    name = slices.device_name(bad)
    driver = dra_node.driver
    assert driver is not None and driver.popen is not None
    pid = driver.popen.pid
    try:
        dra_node.fake.set_gpu(bad, state="Error")
        taints = pods.wait(
            lambda: published(custom, dra_node).get(name, {}).get("taints"), f"{name} tainted", explain=dra_node.log
        )
        assert ours(taints) == [{"key": "metax-tech.com/gpu-health", "value": "StateFault", "effect": "NoSchedule"}]
        assert taints[0].get("timeAdded")  # the server's stamp
        assert len(published(custom, dra_node)) == count  # tainted, not withdrawn
        versions = {s["metadata"]["resourceVersion"] for s in node_slices(custom, dra_node.real.name)}
        _claim(custom, namespace, "every-gpu", claim_spec(count, same_root=False))
        kube.create_namespaced_pod(namespace, claim_pod("everything", dra_node, {"resourceClaimName": "every-gpu"}))
        reason = pods.wait(lambda: gpus.unschedulable(kube, namespace, "everything"), "the scheduler's reason")
        assert "claim" in reason.lower() or "resource" in reason.lower(), reason
        time.sleep(3)  # three readings more: the driver rewrites nothing (the server's timeAdded is no change)
        assert {s["metadata"]["resourceVersion"] for s in node_slices(custom, dra_node.real.name)} == versions
        claim = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", "every-gpu")
        assert allocated_devices(claim) == [] and pods.phase(kube, namespace, "everything") == "Pending"
    finally:
        cleared = time.monotonic()
        dra_node.fake.set_gpu(bad, state="Available")
    interval = float(dra_node.env["METAX_HEALTHY_INTERVAL"])
    pods.wait(
        lambda: "taints" not in published(custom, dra_node)[name], "the taint gone", timeout=30, explain=dra_node.log
    )
    took = time.monotonic() - cleared
    pods.wait_running(kube, namespace, "everything")
    assert len(allocated_devices(pod_claim(kube, custom, namespace, "everything"))) == count
    assert driver.popen.pid == pid and driver.popen.poll() is None  # no restart
    # clear_after (2) readings at the interval, plus one reading's own time and the write
    assert took < 2 * interval + 6, f"the taint took {took:.1f} s to go"


def test_a_plain_gpu_limit_is_served_by_dra_on_a_dra_node(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    pod = pods.scheduled_pod(f"plain-{uuid.uuid4().hex[:6]}", dra_node.real.name, SCRIPT, {gpus.GPU: "1"})
    kube.create_namespaced_pod(namespace, pod)
    name = pod["metadata"]["name"]
    pods.wait_running(kube, namespace, name)
    # The script lists the devices before `env` prints the variable: wait for it, not for any output.
    logs = pods.wait_logs(kube, namespace, name, "METAX_VISIBLE_DEVICES=")
    (address,) = addresses_seen(logs)
    assert address in dra_node.fake.gpu_addresses()
    assert gpus.allocatable(kube, dra_node.real.name) == 0  # no device plugin on this node
    assert images.BUSYBOX_IMAGE


def test_a_bad_claim_configuration_is_refused_in_the_pods_events_naming_the_field(
    kube: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, dra_node: DraNode
) -> None:
    wait_published(custom, dra_node)
    _claim(custom, namespace, "typo", claim_spec(1, same_root=False, macaVersion="2.18"))
    kube.create_namespaced_pod(namespace, claim_pod("typo", dra_node, {"resourceClaimName": "typo"}))

    def refused() -> str:
        for event in kube.list_namespaced_event(namespace).items:
            if event.involved_object.name == "typo" and "macaVersion" in (event.message or ""):
                return str(event.message)
        return ""

    message = pods.wait(refused, "the kubelet's event with the driver's refusal", explain=dra_node.log)
    assert "status.allocation.devices.config[0].opaque.parameters.macaVersion" in message
    assert 'must look like "maca-2"' in message
    assert pods.phase(kube, namespace, "typo") == "Pending"
