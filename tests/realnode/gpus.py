"""GPU helpers shared by the real-node tests: allocatable counts, what a pod's script printed about its
devices and environment, the fake host's GPUs (its device nodes: `metax_dev.realnode.devnodes`)."""

from __future__ import annotations

from kubernetes import client

from metax_core.inventory import PciAddress, PciFunction
from metax_dev.productnode import workloads
from metax_dev.realnode import node
from metax_hw_fake import host
from metax_k8s.podresources import client as podresources

GPU = "metax-tech.com/gpu"
LIST_DEVICES = workloads.LIST_DEVICES
device_lines = workloads.device_lines


def allocatable(core: client.CoreV1Api, node_name: str, resource: str = GPU) -> int:
    return int((core.read_node(node_name).status.allocatable or {}).get(resource, "0"))


def capacity(core: client.CoreV1Api, node_name: str, resource: str = GPU) -> int:
    return int((core.read_node(node_name).status.capacity or {}).get(resource, "0"))


def env_value(text: str, name: str) -> str:
    value = workloads.printed(text, name)
    assert value is not None, f"{name} not printed in:\n{text}"
    return value


def held_by(member: node.RealNode, namespace: str, name: str) -> list[str]:
    """The pod's devices as the kubelet's PodResources API lists them (allocated at admission)."""
    with podresources.PodResourcesClient(member.pod_resources_socket) as api:
        for pod in api.list():
            if (pod.namespace, pod.name) == (namespace, name):
                return list(pod.device_ids(GPU))
    return []


def functions(fake: host.FakeHost) -> list[PciFunction]:
    """The fake host's functions bound to the GPU driver (PFs, and VFs when SR-IOV is on)."""
    return [f for f in fake.devices.functions() if f.driver == "metax"]


def expected_nodes(fake: host.FakeHost, addresses: list[str]) -> set[str]:
    """The device nodes a container given ``addresses`` must see: theirs under /dev, and /dev/mxcd."""
    nodes = {"/dev/mxcd"}
    for address in addresses:
        nodes |= {p for p in fake.devices.device_nodes(PciAddress(address)) if p.startswith("/dev/")}
    return nodes


def unschedulable(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The scheduler's message when the pod is Unschedulable, else ''."""
    status = core.read_namespaced_pod(name, namespace).status
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
            return str(condition.message)
    return ""
