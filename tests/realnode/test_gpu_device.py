"""The project's gpu-device agent on a real node: a pod that asks for MetaX GPUs gets them.

Covered, on a fake MetaX host whose device nodes are real character devices:

* the agent registers with the real kubelet and ``metax-tech.com/gpu`` becomes allocatable with the
  host's GPU count;
* a pod requesting 2 runs and sees exactly its devices: the device nodes of the two GPUs named in
  ``METAX_VISIBLE_DEVICES`` (injected by containerd from the agent's CDI spec and Allocate answer),
  ``/dev/mxcd``, and no other GPU's node;
* a pod asking for more than the node has stays Pending with ``Insufficient metax-tech.com/gpu``;
* a GPU that falls off the bus lowers allocatable, and raises it again when it is back;
* restarting the real kubelet makes the agent register again, and allocatable comes back.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client

from metax_core.inventory import PciFunction
from metax_dev.controlplane import processes
from metax_dev.realnode import node
from metax_hw_fake import host

from . import pods

pytestmark = pytest.mark.realnode
from .conftest import DEVICE_NUMBERS, GPUS

GPU = "metax-tech.com/gpu"


def allocatable(core: client.CoreV1Api, node_name: str) -> int:
    return int((core.read_node(node_name).status.allocatable or {}).get(GPU, "0"))


def registrations(agent: processes.Process) -> int:
    return agent.log_path.read_text().count(f"registered {GPU} with kubelet")


def gpus(fake: host.FakeHost) -> list[PciFunction]:
    return [f for f in fake.devices.functions() if f.driver == "metax"]


def test_gpus_become_allocatable(kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_agent: processes.Process) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    assert registrations(gpu_agent) >= 1
    assert int(kube.read_node(gpu_node.name).status.capacity[GPU]) == GPUS


def test_pod_with_two_gpus_sees_exactly_its_devices(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_host: host.FakeHost,
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

    visible = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("VISIBLE=")][0]
    addresses = visible.split(",")
    assert len(addresses) == 2 and len(set(addresses)) == 2
    by_address = {str(f.address): f for f in gpus(gpu_host)}
    assert set(addresses) <= set(by_address)
    expected = {"/dev/mxcd"}
    for address in addresses:
        expected |= {p for p in gpu_host.devices.device_nodes(by_address[address].address) if p.startswith("/dev/")}
    others = {
        p for a, f in by_address.items() if a not in addresses
        for p in gpu_host.devices.device_nodes(f.address) if p.startswith("/dev/dri/")
    }
    seen = {}
    for line in text.splitlines():
        if line.startswith("NODE "):
            _, path, rest = line.split(" ", 2)
            seen[path] = rest
    assert set(seen) == expected, f"container sees {sorted(seen)}, expected {sorted(expected)}"
    assert not set(seen) & others
    major, minor = DEVICE_NUMBERS
    assert all(v == f"character special file {major:x}:{minor:x}" for v in seen.values()), seen


def test_pod_beyond_capacity_stays_pending(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    pod = pods.scheduled_pod("greedy", gpu_node.name, "sleep 3600", {GPU: str(GPUS + 1)})
    kube.create_namespaced_pod(namespace, pod)

    def unschedulable() -> str:
        status = kube.read_namespaced_pod("greedy", namespace).status
        for condition in status.conditions or []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                return str(condition.message)
        return ""

    message = pods.wait(unschedulable, "pod greedy Unschedulable")
    assert f"Insufficient {GPU}" in message
    assert pods.phase(kube, namespace, "greedy") == "Pending"


def test_gpu_falling_off_the_bus_lowers_allocatable(
    kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_host: host.FakeHost, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    lost = str(gpus(gpu_host)[-1].address)
    gpu_host.fall_off_bus(lost)
    try:
        pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS - 1, f"{GPUS - 1} allocatable {GPU}")
        assert int(kube.read_node(gpu_node.name).status.capacity[GPU]) == GPUS
    finally:
        gpu_host.clear_faults()
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} again")


def test_kubelet_restart_makes_the_agent_register_again(
    kube: client.CoreV1Api, gpu_node: node.RealNode, gpu_agent: processes.Process
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    before = registrations(gpu_agent)
    gpu_node.restart_kubelet()
    pods.wait(lambda: registrations(gpu_agent) > before, "the agent to register again")
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} after restart")
    assert gpu_agent.alive()
    assert "kubelet restarted: restarting plugin servers and registering again" in gpu_agent.log_path.read_text()
