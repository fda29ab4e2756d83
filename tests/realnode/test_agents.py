"""The node agents on a real node: a GPU pod waits for their readiness, and a VF edit changes what the real
kubelet allocates (C2, C3, C5, R-READY, R-VF, R-DRIVER).

One real node (kubelet + containerd + runc built here) on its own fake MetaX host with 2 GPUs, the host's
own driver 2.18.0 loaded and a payload driver 2.20.0 (PreferCloud): gpu-label, driver-manager,
vfio-manager and gpu-device run as host processes in the node's namespaces (``RealNode.spawn``, like
``test_gpu_device.py``'s agent), each with the fake host's adapters (``python -m metax_dev.agents``).
There is no product image of the agents yet (issue 14), so they are not DaemonSet pods. The test stands
in for udev (the fake kernel's new device nodes become character devices) and for the two components that
have no agent yet (container-runtime and maca publish ready); everything else is observed through the API
server and the real kubelet:

* R-READY: with gpu-device running but the agents not started, a pod asking for both GPUs is
  Unschedulable (``Insufficient metax-tech.com/gpu``: the node has no such capacity) and gpu-device
  registers nothing; once the agents have published readiness (driver-manager loaded the payload driver
  and labelled ``driver.ready``, gpu-label published), the same pod runs and sees exactly the device
  nodes of the two GPUs in ``METAX_VISIBLE_DEVICES`` (containerd injected them from the CDI spec);
* R-VF: a pod asking for 3 GPUs is Unschedulable on the 2 PFs; editing ``driver-config`` to 2 VFs per GPU
  for this node makes the real kubelet's allocatable ``metax-tech.com/gpu`` 4 (the VFs replace their PFs),
  and the pod runs with 3 VFs' device nodes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from metax_core.node import labels, readiness
from metax_dev import agents
from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import errors, processes
from metax_dev.realnode import launcher, node
from metax_hw import hostfiles
from metax_hw_fake import builder, host

from . import gpus, pods
from .gpus import GPU

pytestmark = pytest.mark.realnode

PFS = 2
VFNUM = 2
WAIT = 180.0
"""Seconds to wait for the agents' work (a driver reload, a VF change): generous on a loaded machine."""
DRIVER_READY = "metax-tech.com/driver.ready"
SCRIPT = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; ' + gpus.LIST_DEVICES + "echo DONE; sleep 3600"


class AgentsNode:
    """A real node on its own fake host, and the node agents started on it as host processes."""

    def __init__(self, member: node.RealNode, fake: host.FakeHost, env: dict[str, str]) -> None:
        self.node, self.fake, self.env = member, fake, env
        self.processes: dict[str, processes.Process] = {}

    @property
    def name(self) -> str:
        return self.node.name

    def start(self, agent: str) -> processes.Process:
        """Start ``agent`` unless it runs already (tests of this module may run alone or in order)."""
        if agent not in self.processes:
            env = {**self.env, **agents.FAST[agent]}
            changed = {k: v for k, v in env.items() if os.environ.get(k) != v}  # the rest is inherited
            self.processes[agent] = self.node.spawn(agent, agents.command(agent), changed)
        return self.processes[agent]

    def publish_missing_agents(self) -> None:
        """container-runtime and maca have no agents yet: the test publishes their signals, as they will."""
        board = hostfiles.FileReadinessBoard(self.fake.root)
        for component in ("container-runtime", "maca"):
            board.publish(readiness.ComponentReadiness(component, True, "test: no agent yet"))

    def start_all(self) -> None:
        self.publish_missing_agents()
        for agent in agents.AGENTS:
            self.start(agent)

    def registrations(self) -> int:
        process = self.processes.get("gpu-device")
        return process.log_path.read_text().count(f"registered {GPU} with kubelet") if process else 0

    def logs(self) -> str:
        return "\n".join(f"--- {a}:\n{p.log_path.read_text()[-3000:]}" for a, p in self.processes.items())

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()


@pytest.fixture(scope="module")
def agents_node(realnode_plane: controlplane.ControlPlane) -> Iterator[AgentsNode]:
    work = Path(tempfile.mkdtemp(prefix="metax-agentsnode-"))
    api = realnode_plane.api_client()
    core = client.CoreV1Api(api)
    namespace = f"agents-{uuid.uuid4().hex[:8]}"  # where driver-config and metax-vfio-config live
    core.create_namespace({"metadata": {"name": namespace}})
    nodes = launcher.RealNodes(realnode_plane, 0, prefix="agents-node")
    fake = builder.FakeHostBuilder().gpus(PFS).host_driver("2.18.0").build(work / "host")
    gpus.make_device_nodes_real(fake.root)
    member: AgentsNode | None = None
    try:
        with gpus.udev(fake.root):
            nodes.start()
            real = nodes.add_node(device_root=fake.root)
            env = agents.environment(
                fake,
                node_name=real.name,
                kubeconfig=realnode_plane.kubeconfig_path,
                namespace=namespace,
                payload=agents.write_payload(work / "payload"),
            )
            env["METAX_POD_RESOURCES_SOCKET"] = str(real.pod_resources_socket)  # which devices pods hold
            member = AgentsNode(real, fake, env)
            yield member
    except errors.ControlPlaneError as exc:
        pytest.fail(f"real node failed to start: {exc}", pytrace=False)
    finally:
        if member is not None:
            member.stop()
        nodes.stop()
        core.delete_namespace(namespace)
        api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client
        shutil.rmtree(work, ignore_errors=True)


def node_labels(core: client.CoreV1Api, name: str) -> dict[str, str]:
    return dict(core.read_node(name).metadata.labels or {})


def test_gpu_pod_stays_pending_until_the_agents_publish_readiness(
    kube: client.CoreV1Api, namespace: str, agents_node: AgentsNode
) -> None:
    n = agents_node
    n.publish_missing_agents()
    device = n.start("gpu-device")
    kube.create_namespaced_pod(namespace, pods.scheduled_pod("waiting", n.name, SCRIPT, {GPU: str(PFS)}))

    message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "waiting"), "pod waiting Unschedulable")
    assert f"Insufficient {GPU}" in message
    waiting = pods.wait(
        lambda: "advertising nothing yet" in device.log_path.read_text(), "gpu-device to decide not to advertise"
    )
    assert waiting and n.registrations() == 0
    assert gpus.capacity(kube, n.name) == 0
    assert DRIVER_READY not in node_labels(kube, n.name)
    assert pods.phase(kube, namespace, "waiting") == "Pending"

    for agent in ("gpu-label", "driver-manager", "vfio-manager"):
        n.start(agent)
    pods.wait(
        lambda: pods.phase(kube, namespace, "waiting") == "Running",
        "the GPU pod to run once the agents are ready",
        timeout=WAIT,
        explain=lambda: pods.describe(kube, namespace) + "\n" + n.logs(),
    )
    signals = hostfiles.FileReadinessBoard(n.fake.root).read_all()
    assert all(signals[c].ready for c in ("gpu-label", "driver")), signals
    assert node_labels(kube, n.name)[DRIVER_READY] == "true"
    assert n.fake.module_version("metax") == agents.PAYLOAD_VERSION  # driver-manager loaded the payload
    assert n.registrations() >= 1

    text = pods.wait_logs(kube, namespace, "waiting", "DONE")
    visible = gpus.env_value(text, "VISIBLE").split(",")
    assert sorted(visible) == sorted(str(f.address) for f in gpus.functions(n.fake))
    seen = gpus.device_lines(text)
    assert set(seen) == gpus.expected_nodes(n.fake, visible), text
    major, minor = gpus.DEVICE_NUMBERS
    assert all(v == f"character special file {major:x}:{minor:x}" for v in seen.values()), seen


def test_vf_count_edit_changes_what_the_kubelet_allocates(
    kube: client.CoreV1Api, namespace: str, agents_node: AgentsNode
) -> None:
    n = agents_node
    n.start_all()
    pods.wait(
        lambda: gpus.allocatable(kube, n.name) == PFS,
        f"{PFS} allocatable {GPU}",
        timeout=WAIT,
        explain=n.logs,
    )
    wanted = PFS + 1  # more than the PFs, no more than the VFs to come
    kube.create_namespaced_pod(namespace, pods.scheduled_pod("more", n.name, SCRIPT, {GPU: str(wanted)}))
    message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "more"), "pod more Unschedulable")
    assert f"Insufficient {GPU}" in message

    config_namespace = n.env["METAX_NAMESPACE"]
    body = {
        "metadata": {"name": "driver-config", "namespace": config_namespace},
        "data": {"node-vfnums": f"nodes:\n  {n.name}:\n    vfnum: {VFNUM}\n"},
    }
    kube.create_namespaced_config_map(config_namespace, body)
    try:
        pods.wait(
            lambda: gpus.allocatable(kube, n.name) == PFS * VFNUM,
            f"{PFS * VFNUM} allocatable {GPU} after the VF edit",
            timeout=WAIT,
            explain=n.logs,
        )
        assert gpus.capacity(kube, n.name) == PFS * VFNUM
        pods.wait(lambda: node_labels(kube, n.name).get(labels.GPU_VFNUM) == str(VFNUM), "gpu-label's gpu.vfnum")
        functions = gpus.functions(n.fake)
        vfs = {str(f.address) for f in functions if f.physfn is not None}
        assert len(vfs) == PFS * VFNUM

        text = pods.wait_logs(kube, namespace, "more", "DONE")
        visible = gpus.env_value(text, "VISIBLE").split(",")
        assert len(set(visible)) == wanted and set(visible) <= vfs
        assert set(gpus.device_lines(text)) == gpus.expected_nodes(n.fake, visible), text
    finally:
        kube.delete_namespaced_config_map("driver-config", config_namespace)
