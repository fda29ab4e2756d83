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
* a pod waiting for capacity while the VF count changes (issue 20, item 3): it fits once the first GPU
  has its VFs and the others not yet (driver-manager's round writes ``sriov_numvfs`` GPU by GPU), the
  kubelet allocates it the PFs that are about to get VFs, the round completes while an init container
  holds the pod back; the spec on disk still has the entries of the PFs the pod holds, and the pod starts
  with exactly the devices it was allocated (before the fix: ``unresolvable CDI devices
  metax-tech.com/gpu=<PF>``, the CI failure of ``test_agents.py``);
* while the CDI spec cannot be written, the agent withdraws the GPUs (a new pod waits Unschedulable
  instead of failing in containerd); once it can write it again, the GPUs come back and the pod starts;
* restarting the real kubelet makes the agent register again, and allocatable comes back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from metax_core.node import cdi
from metax_dev.controlplane import processes
from metax_dev.realnode import images, node
from metax_hw_fake import host
from metax_k8s.podresources import client as podresources
from tests.support.real_node import DEVICE_NUMBERS, GPUS, make_device_nodes_real

from . import gpus, pods

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


def cdi_spec_path(fake: host.FakeHost) -> Path:
    return fake.root / "var/run/cdi" / cdi.spec_file_name()


def cdi_names_on_disk(fake: host.FakeHost) -> set[str]:
    return {d["name"] for d in json.loads(cdi_spec_path(fake).read_text())["devices"]}


def gated_pod(name: str, member: node.RealNode, script: str, gpus_wanted: int, gate: Path) -> dict[str, Any]:
    """A pod placed by the scheduler whose GPU container is created only once ``gate/open`` exists: an init
    container (no GPU) waits for it. The kubelet allocates every container's devices at admission, so the
    pod holds its GPUs while it waits."""
    pod = pods.scheduled_pod(name, member.name, script, {GPU: str(gpus_wanted)})
    pod["spec"]["initContainers"] = [
        {
            "name": "gate",
            "image": images.BUSYBOX_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "until [ -e /gate/open ]; do sleep 0.1; done"],
            "volumeMounts": [{"name": "gate", "mountPath": "/gate"}],
        }
    ]
    pod["spec"]["volumes"] = [{"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}}]
    return pod


def test_pod_allocated_during_a_vf_change_starts_with_its_devices(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    pfs = [f for f in gpus.functions(gpu_host) if f.physfn is None]
    assert len(pfs) == GPUS
    vfnum = 2
    wanted = GPUS + 1  # more than the PFs; fits once the first GPU has its VFs and the others not yet
    gate = gpu_host.root.parent / f"gate-{namespace}"
    gate.mkdir()
    script = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; ' + LIST_DEVICES + "echo DONE; sleep 3600"
    kube.create_namespaced_pod(namespace, gated_pod("during-vf-change", gpu_node, script, wanted, gate))
    try:
        message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "during-vf-change"), "pod Unschedulable")
        assert f"Insufficient {GPU}" in message

        # driver-manager's round, first write: the first GPU gets its VFs, the others have none yet
        gpu_host.binder.set_vf_count(pfs[0].address, vfnum)
        make_device_nodes_real(gpu_host.root)
        held = pods.wait(
            lambda: gpus.held_by(gpu_node, namespace, "during-vf-change"),
            "the kubelet to allocate the pod's GPUs",
            explain=lambda: pods.describe(kube, namespace) + "\n" + gpu_agent.log_path.read_text()[-3000:],
        )
        assert len(held) == wanted
        about_to_go = {str(f.address) for f in pfs[1:]}
        assert about_to_go <= set(held)  # the pod holds the PFs that are about to get VFs

        # the rest of the round: every other GPU gets its VFs; their PFs are withdrawn
        for pf in pfs[1:]:
            gpu_host.binder.set_vf_count(pf.address, vfnum)
        make_device_nodes_real(gpu_host.root)
        pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS * vfnum, f"{GPUS * vfnum} allocatable VFs")
        vfs = {str(f.address) for f in gpus.functions(gpu_host) if f.physfn is not None}
        pods.wait(lambda: {cdi.device_name(v) for v in vfs} <= cdi_names_on_disk(gpu_host), "the VFs' CDI entries")
        assert {cdi.device_name(a) for a in held} <= cdi_names_on_disk(gpu_host)  # what the pod holds resolves
        assert "keeping the CDI entry of withdrawn" in gpu_agent.log_path.read_text()

        (gate / "open").touch()  # now containerd creates the GPU container
        text = pods.wait_logs(kube, namespace, "during-vf-change", "DONE")
        visible = env_value(text, "VISIBLE").split(",")
        assert sorted(visible) == sorted(held)
        assert set(device_lines(text)) == gpus.expected_nodes(gpu_host, visible), text
    finally:
        kube.delete_namespaced_pod("during-vf-change", namespace, grace_period_seconds=0)
        pods.wait(lambda: not gpus.held_by(gpu_node, namespace, "during-vf-change"), "the pod's GPUs released")
        for pf in pfs:
            gpu_host.binder.set_vf_count(pf.address, 0)
        shutil.rmtree(gate, ignore_errors=True)
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU} without VFs")


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


def test_pod_waits_for_an_unwritable_cdi_spec_and_then_starts(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_host: host.FakeHost,
    gpu_agent: processes.Process,
) -> None:
    pods.wait(lambda: allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    spec = cdi_spec_path(gpu_host)
    assert spec.is_file()
    spec.unlink()
    spec.mkdir()  # something that is no spec sits where the spec belongs: the agent cannot write it
    try:
        pods.wait(lambda: allocatable(kube, gpu_node.name) == 0, f"the agent to withdraw every {GPU}")
        kube.create_namespaced_pod(
            namespace, pods.scheduled_pod("patient", gpu_node.name, "echo STARTED; sleep 3600", {GPU: "1"})
        )
        message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "patient"), "pod patient Unschedulable")
        assert f"Insufficient {GPU}" in message
        assert "cannot write the CDI spec" in gpu_agent.log_path.read_text()
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
