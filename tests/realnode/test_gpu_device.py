"""The project's gpu-device agent on a real node: a pod that asks for MetaX GPUs gets them.

Covered, on a fake MetaX host whose device nodes are real character devices:

* the agent registers with the real kubelet and ``metax-tech.com/gpu`` becomes allocatable with the
  host's GPU count;
* a pod requesting 2 runs and sees exactly its devices: the device nodes of the two GPUs named in
  ``METAX_VISIBLE_DEVICES`` (injected by containerd from the agent's CDI spec and Allocate answer),
  ``/dev/mxcd``, and no other GPU's node;
* a pod asking for more than the node has stays Pending with ``Insufficient metax-tech.com/gpu``;
* a GPU that falls off the bus lowers allocatable, and raises it again when it is back;
* sGPU mode (node label): ``metax-tech.com/sgpu`` with 16 shares per GPU replaces ``gpu``, and a pod
  asking for shares gets the GPUs behind them and the share variables;
* a GPU bound to vfio-pci moves to ``metax-tech.com/vfio-gpu``: a pod gets ``/dev/vfio/vfio``, the
  group's node and the PCI address in the variable KubeVirt reads;
* the kubelet's PodResources API (read with ``metax_k8s.podresources.client``) lists the GPU pod's
  devices, the same ones the container sees, and the node's allocatable GPUs;
* while the CDI spec cannot be read, a GPU pod fails to start with containerd's ``unresolvable CDI
  devices``; once the agent can write it again, the same pod starts (kubelet retries);
* restarting the real kubelet makes the agent register again, and allocatable comes back.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from metax_dev.controlplane import processes
from metax_dev.realnode import node
from metax_hw_fake import host
from metax_k8s.podresources import client as podresources

from . import gpus, pods
from .conftest import DEVICE_NUMBERS, GPUS, make_device_nodes_real

pytestmark = pytest.mark.realnode

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
VFIO = "metax-tech.com/vfio-gpu"
MODE_LABEL = "metax-tech.com/gpu-device.mode"
SHARES = 16


allocatable = gpus.allocatable
device_lines = gpus.device_lines
env_value = gpus.env_value
LIST_DEVICES = gpus.LIST_DEVICES


def registrations(agent: processes.Process) -> int:
    return agent.log_path.read_text().count(f"registered {GPU} with kubelet")


def test_gpus_become_allocatable(kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_agent: processes.Process) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    assert registrations(gpu_agent) >= 1
    assert int(kube.read_node(gpu_node.name).status.capacity[GPU]) == GPUS


def test_pod_with_two_gpus_sees_exactly_its_devices(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    script = (
        'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; '
        "for f in /dev/dri/* /dev/mxcd; do stat -c 'NODE %n %F %t:%T' \"$f\"; done; "
        "echo DONE; sleep 3600"
    )
    kube.create_namespaced_pod(namespace, pods.busybox_pod("two", gpu_node.name, script, resources={GPU: "2"}))
    text = pods.wait_logs(kube, namespace, "two", "DONE")

    visible = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("VISIBLE="))
    addresses = visible.split(",")
    assert len(addresses) == 2 and len(set(addresses)) == 2
    by_address = {str(f.address): f for f in gpus.functions(gpu_host)}
    assert set(addresses) <= set(by_address)
    expected = {"/dev/mxcd"}
    for address in addresses:
        expected |= {p for p in gpu_host.devices.device_nodes(by_address[address].address) if p.startswith("/dev/")}
    others = {
        p
        for a, f in by_address.items()
        if a not in addresses
        for p in gpu_host.devices.device_nodes(f.address)
        if p.startswith("/dev/dri/")
    }
    seen = device_lines(text)
    assert set(seen) == expected, f"container sees {sorted(seen)}, expected {sorted(expected)}"
    assert not set(seen) & others
    major, minor = DEVICE_NUMBERS
    assert all(v == f"character special file {major:x}:{minor:x}" for v in seen.values()), seen


def test_pod_resources_api_lists_the_pods_devices(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    script = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; echo DONE; sleep 3600'
    kube.create_namespaced_pod(namespace, pods.busybox_pod("held", gpu_node.name, script, resources={GPU: "2"}))
    visible = env_value(pods.wait_logs(kube, namespace, "held", "DONE"), "VISIBLE").split(",")

    with podresources.PodResourcesClient(gpu_node.pod_resources_socket) as api:
        listed = {(p.namespace, p.name): p for p in api.list()}
        assert sorted(listed[(namespace, "held")].device_ids(GPU)) == sorted(visible)
        got = api.get(namespace, "held")
        assert [c.name for c in got.containers] == ["main"]
        assert sorted(got.containers[0].device_ids(GPU)) == sorted(visible)
        offered = {i for d in api.allocatable() if d.resource == GPU for i in d.ids}
    assert offered == {str(f.address) for f in gpus.functions(gpu_host)}


def test_pod_beyond_capacity_stays_pending(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    pod = pods.scheduled_pod("greedy", gpu_node.name, "sleep 3600", {GPU: str(GPUS + 1)})
    kube.create_namespaced_pod(namespace, pod)

    message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "greedy"), "pod greedy Unschedulable")
    assert f"Insufficient {GPU}" in message
    assert pods.phase(kube, namespace, "greedy") == "Pending"


def test_gpu_falling_off_the_bus_lowers_allocatable(
    kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_host: host.FakeHost, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    lost = str(gpus.functions(gpu_host)[-1].address)
    gpu_host.fall_off_bus(lost)
    try:
        pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS - 1, f"{GPUS - 1} allocatable {GPU}")
        assert int(kube.read_node(gpu_node.name).status.capacity[GPU]) == GPUS
    finally:
        gpu_host.clear_faults()
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} again")


def test_sgpu_mode_advertises_shares(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    kube.patch_node(gpu_node.name, {"metadata": {"labels": {MODE_LABEL: "sgpu"}}})
    try:
        pods.wait(
            lambda: allocatable(kube, gpu_node.name, SGPU) == GPUS * SHARES and allocatable(kube, gpu_node.name) == 0,
            f"{GPUS * SHARES} allocatable {SGPU} and no {GPU}",
        )
        script = "env | grep ^METAX_ | sort; " + LIST_DEVICES + "echo DONE; sleep 3600"
        kube.create_namespaced_pod(namespace, pods.busybox_pod("shares", gpu_node.name, script, resources={SGPU: "3"}))
        text = pods.wait_logs(kube, namespace, "shares", "DONE")
        assert env_value(text, "METAX_SGPU_SHARES_PER_GPU") == str(SHARES)
        visible = env_value(text, "METAX_VISIBLE_DEVICES").split(",")
        assert visible and set(visible) <= {str(f.address) for f in gpus.functions(gpu_host)}
        shares = dict(item.split("=") for item in env_value(text, "METAX_SGPU_SHARES").split(","))
        assert set(shares) == set(visible) and sum(int(v) for v in shares.values()) == 3
        by_address = {str(f.address): f for f in gpus.functions(gpu_host)}
        expected = {"/dev/mxcd"} | {
            p
            for a in visible
            for p in gpu_host.devices.device_nodes(by_address[a].address)
            if p.startswith("/dev/dri/")
        }
        assert set(device_lines(text)) == expected
    finally:
        kube.patch_node(gpu_node.name, {"metadata": {"labels": {MODE_LABEL: None}}})
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} back in native mode")


def test_vfio_bound_gpu_is_offered_as_vfio_gpu(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    function = gpus.functions(gpu_host)[0]
    gpu_host.binder.bind(function.address, "vfio-pci")
    make_device_nodes_real(gpu_host.root)
    try:
        pods.wait(
            lambda: allocatable(kube, gpu_node.name, VFIO) == 1 and allocatable(kube, gpu_node.name) == GPUS - 1,
            f"1 allocatable {VFIO} and {GPUS - 1} {GPU}",
        )
        # The container's original environment (/proc/1/environ): a shell drops names with dashes.
        script = (
            "tr '\\0' '\\n' < /proc/1/environ | grep ^PCI_RESOURCE_ | sort; " + LIST_DEVICES + "echo DONE; sleep 3600"
        )
        kube.create_namespaced_pod(namespace, pods.busybox_pod("vm", gpu_node.name, script, resources={VFIO: "1"}))
        text = pods.wait_logs(kube, namespace, "vm", "DONE")
        assert env_value(text, "PCI_RESOURCE_METAX-TECH_COM_VFIO-GPU") == str(function.address)
        assert env_value(text, "PCI_RESOURCE_METAX_TECH_COM_VFIO_GPU") == str(function.address)
        expected = set(gpu_host.devices.device_nodes(function.address))
        assert "/dev/vfio/vfio" in expected and len(expected) == 2
        assert set(device_lines(text)) == expected
    finally:
        gpu_host.binder.bind(function.address, "metax")
        make_device_nodes_real(gpu_host.root)
    pods.wait(
        lambda: allocatable(kube, gpu_node.name) == GPUS and allocatable(kube, gpu_node.name, VFIO) == 0,
        f"{GPUS} allocatable {GPU} and no {VFIO} again",
    )


def test_pod_waits_for_an_unreadable_cdi_spec_and_then_starts(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    spec = gpu_host.root / "var/run/cdi/metax-tech.com-gpu.json"
    assert spec.is_file()
    spec.unlink()
    spec.mkdir()  # something that is no spec sits where the spec belongs: the agent cannot write it
    try:
        kube.create_namespaced_pod(
            namespace, pods.busybox_pod("patient", gpu_node.name, "echo STARTED; sleep 3600", resources={GPU: "1"})
        )

        def create_error() -> str:
            for status in kube.read_namespaced_pod("patient", namespace).status.container_statuses or []:
                waiting = status.state.waiting
                if waiting is not None and waiting.reason == "CreateContainerError":
                    return str(waiting.message)
            return ""

        message = pods.wait(create_error, "CreateContainerError", explain=lambda: pods.describe(kube, namespace))
        assert "unresolvable CDI devices metax-tech.com/gpu=" in message
    finally:
        spec.rmdir()
    pods.wait(spec.is_file, "the agent to write the CDI spec again")
    assert "STARTED" in pods.wait_logs(kube, namespace, "patient", "STARTED")


def test_kubelet_restart_makes_the_agent_register_again(
    kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    before = registrations(gpu_agent)
    gpu_node.restart_kubelet()
    pods.wait(lambda: registrations(gpu_agent) > before, "the agent to register again")
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} after restart")
    assert gpu_agent.alive()
    assert "kubelet restarted: restarting metax-tech.com/gpu and registering again" in gpu_agent.log_path.read_text()
