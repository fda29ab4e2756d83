"""The node agents on a real node: a GPU pod waits for their readiness, and a VF edit changes what the real
kubelet allocates (C2, C3, C4, C5, C6, R-READY, R-VF, R-DRIVER).

One real node (kubelet + containerd + runc built here) on its own fake MetaX host with 2 GPUs, the host's
own driver 2.18.0 loaded and a payload driver 2.20.0 (PreferCloud): gpu-label, driver-manager,
vfio-manager, maca (one fake SDK payload, MXMACA 2.18.0.3) and gpu-device run as host processes in the
node's namespaces (``RealNode.spawn``, like ``test_gpu_device.py``'s agent), each with the fake host's
adapters (``python -m metax_dev.agents``). container-runtime configures the node's running containerd (its
drop-in, the real static wrapper, one restart) and runs its loop in the test process, because its service
manager is the launcher there (`runtime_agent.HarnessService`, as systemd on a node); its readiness goes to
the fake host's board like the others'. There is no product image of the agents yet (issue 14), so they are
not DaemonSet pods. **No readiness signal is written by the test**: gpu-device advertises only because each
required agent published its own. The test stands in only for udev (the fake kernel's new device nodes become
character devices); everything else is observed through the API server, the real kubelet and the fake host:

* R-READY: with gpu-device running but no other agent started, no signal exists on the host, gpu-device
  names every required component as missing, a pod asking for both GPUs is Unschedulable (``Insufficient
  metax-tech.com/gpu``: the node has no such capacity) and gpu-device registers nothing; once the agents
  have published readiness (driver-manager loaded the payload driver and labelled ``driver.ready``,
  gpu-label published, container-runtime's handler is loaded by the running containerd after one restart,
  maca installed its SDK), the same pod runs and sees exactly the device nodes of the two GPUs in
  ``METAX_VISIBLE_DEVICES`` (containerd injected them from the CDI spec); every signal on the host is its
  agent's write (the publisher's sequence, each agent's own reason and version);
* R-VF: a pod asking for 3 GPUs is Unschedulable on the 2 PFs; editing ``driver-config`` to 2 VFs per GPU
  for this node makes the real kubelet's allocatable ``metax-tech.com/gpu`` 4 (the VFs replace their PFs),
  and the pod runs with 3 VFs' device nodes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from metax_core import components
from metax_core.node import labels
from metax_core.runtime import containerd
from metax_dev import agents, fake_sdk, wrapper
from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import errors, processes
from metax_dev.productnode import runtime_agent
from metax_dev.realnode import devnodes, launcher, node
from metax_hw import hostfiles
from metax_hw_fake import builder, host
from services._agent import cluster
from services.container_runtime import agent as runtime_agent_module
from services.container_runtime import bootstrap as runtime_bootstrap
from services.gpu_device import config as device_config

from . import gpus, pods
from .gpus import GPU

pytestmark = pytest.mark.realnode

PFS = 2
VFNUM = 2
WAIT = 180.0
"""Seconds to wait for the agents' work (a driver reload, a VF change): generous on a loaded machine."""
DRIVER_READY = "metax-tech.com/driver.ready"
SCRIPT = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; ' + gpus.LIST_DEVICES + "echo DONE; sleep 3600"
MACA_VERSION = "2.18.0.3"
"""The SDK version of maca's one payload image."""
RUNTIME = "container-runtime"
RUNTIME_INTERVAL = 10.0
"""Seconds between container-runtime's rounds after the first (each re-reads the files and asks containerd)."""


class AgentsNode:
    """A real node on its own fake host, and the node agents started on it: host processes, and container-runtime
    in this process (its service manager, the launcher, lives here)."""

    def __init__(
        self, member: node.RealNode, fake: host.FakeHost, env: dict[str, str], work: Path, kubeconfig: Path
    ) -> None:
        self.node, self.fake, self.env, self.work, self.kubeconfig = member, fake, env, work, kubeconfig
        self.processes: dict[str, processes.Process] = {}
        self.board = hostfiles.FileReadinessBoard(fake.root)
        self.runtime: runtime_agent_module.ContainerRuntime | None = None
        self._runtime_stop = threading.Event()
        self._runtime_thread: threading.Thread | None = None
        payload = work / "maca-payload"
        fake_sdk.unpack_payload(fake_sdk.write_payload_image(work / "maca-images", MACA_VERSION), payload / "0")
        self.overrides = {
            "maca": {"METAX_PAYLOAD_DIR": str(payload), "METAX_PAYLOAD_IMAGES": fake_sdk.reference(MACA_VERSION)}
        }

    @property
    def name(self) -> str:
        return self.node.name

    def start(self, agent: str) -> None:
        """Start ``agent`` unless it runs already (tests of this module may run alone or in order)."""
        if agent == RUNTIME:
            self.start_runtime()
        elif agent not in self.processes:
            env = {**self.env, **agents.FAST[agent], **self.overrides.get(agent, {})}
            changed = {k: v for k, v in env.items() if os.environ.get(k) != v}  # the rest is inherited
            self.processes[agent] = self.node.spawn(agent, agents.command(agent), changed)

    def start_runtime(self) -> None:
        """container-runtime with the real API server and the fake host's readiness board: its first round here
        (configure, one containerd restart through the launcher, publish), then its loop in a thread, as
        ``python -m services.container_runtime`` runs it."""
        if self.runtime is not None:
            return
        root = str(self.fake.root)
        self.runtime = runtime = runtime_agent.build(
            self.node,
            self.work / RUNTIME,
            wrapper.build(),
            board=self.fake.root,
            ports=cluster.production(RUNTIME, self.name, kubeconfig=str(self.kubeconfig)),
            wrapper_runc=str(self.node.bin_dir / "runc"),
            edit_socket=f"{root}/run/metax/container-edit.sock",
            interval=RUNTIME_INTERVAL,
        )
        runtime.tick()  # here, not in the thread: the restart ends before another agent or test step goes on
        self._runtime_thread = threading.Thread(
            target=runtime_bootstrap.runner(runtime), args=(self._runtime_stop,), name=RUNTIME, daemon=True
        )
        self._runtime_thread.start()

    def start_all(self) -> None:
        for agent in (*agents.AGENTS, RUNTIME):
            self.start(agent)

    def registrations(self) -> int:
        process = self.processes.get("gpu-device")
        return process.log_path.read_text().count(f"registered {GPU} with kubelet") if process else 0

    def logs(self) -> str:
        texts = [f"--- {a}:\n{p.log_path.read_text()[-3000:]}" for a, p in self.processes.items()]
        return "\n".join([*texts, f"--- readiness signals: {self.board.read_all()}"])

    def stop(self) -> None:
        """The runtime's loop first: it restarts containerd through the node, which stops next."""
        self._runtime_stop.set()
        if self._runtime_thread is not None:
            self._runtime_thread.join(60)
            assert not self._runtime_thread.is_alive(), "container-runtime's loop did not stop"
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
    devnodes.make_device_nodes_real(fake.root)
    member: AgentsNode | None = None
    try:
        with devnodes.udev(fake.root):
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
            member = AgentsNode(real, fake, env, work, realnode_plane.kubeconfig_path)
            yield member
    except errors.ControlPlaneError as exc:
        pytest.fail(f"real node failed to start: {exc}", pytrace=False)
    finally:
        try:
            if member is not None:
                member.stop()
        finally:
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
    n.start("gpu-device")
    device = n.processes["gpu-device"]
    kube.create_namespaced_pod(namespace, pods.scheduled_pod("waiting", n.name, SCRIPT, {GPU: str(PFS)}))

    message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "waiting"), "pod waiting Unschedulable")
    assert f"Insufficient {GPU}" in message
    missing = "no readiness signal from " + ", ".join(device_config.default_required())
    waiting = pods.wait(
        lambda: f"advertising nothing yet: {missing}" in device.log_path.read_text(),
        "gpu-device to decide not to advertise, every required signal missing",
    )
    assert waiting and n.registrations() == 0
    assert n.board.read_all() == {}  # nobody published anything: the test does not, no other agent runs
    assert gpus.capacity(kube, n.name) == 0
    assert DRIVER_READY not in node_labels(kube, n.name)
    assert pods.phase(kube, namespace, "waiting") == "Pending"

    for agent in ("gpu-label", "driver-manager", "vfio-manager", "maca", RUNTIME):
        n.start(agent)
    pods.wait(
        lambda: pods.phase(kube, namespace, "waiting") == "Running",
        "the GPU pod to run once the agents are ready",
        timeout=WAIT,
        explain=lambda: pods.describe(kube, namespace) + "\n" + n.logs(),
    )
    assert node_labels(kube, n.name)[DRIVER_READY] == "true"
    assert n.fake.module_version("metax") == agents.PAYLOAD_VERSION  # driver-manager loaded the payload
    assert n.registrations() >= 1
    assert_signals_are_the_agents_own(kube, n)

    text = pods.wait_logs(kube, namespace, "waiting", "DONE")
    visible = gpus.env_value(text, "VISIBLE").split(",")
    assert sorted(visible) == sorted(str(f.address) for f in gpus.functions(n.fake))
    seen = gpus.device_lines(text)
    assert set(seen) == gpus.expected_nodes(n.fake, visible), text
    major, minor = devnodes.DEVICE_NUMBERS
    assert all(v == f"character special file {major:x}:{minor:x}" for v in seen.values()), seen


def assert_signals_are_the_agents_own(kube: client.CoreV1Api, n: AgentsNode) -> None:
    """Every signal on the fake host is one agent's write, with what that agent says (R-READY): the agents'
    publisher numbers each write (``sequence``), and each reason and version is the agent's own account of
    the host (the payload driver loaded, the GPUs labelled, the SDK installed, the handler in the running
    containerd)."""
    signals = n.board.read_all()
    signal = components.signal
    kinds = components.Component
    assert set(signals) == {signal(c) for c in (kinds.GPU_LABEL, kinds.DRIVER, kinds.VFIO_MANAGER, kinds.MACA)} | {
        RUNTIME
    }, signals
    assert all(s.sequence is not None for s in signals.values()), signals
    assert all(signals[c].ready for c in device_config.default_required()), signals
    assert signals["gpu-label"].reason == f"labelled {PFS} GPU(s)"
    driver = signals["driver"]
    assert (driver.reason, driver.version) == (
        f"metax {agents.PAYLOAD_VERSION} loaded, {PFS} GPU(s) answer",
        agents.PAYLOAD_VERSION,
    )
    maca = signals["maca"]
    assert (maca.reason, maca.version) == (f"MXMACA installed: {MACA_VERSION}", MACA_VERSION)
    assert (n.fake.root / "var/lib/metax/maca" / MACA_VERSION / "bin/maca-version").is_file()
    assert node_labels(kube, n.name)[labels.GPU_MACA_VERSION] == MACA_VERSION
    runtime = n.runtime
    assert runtime is not None and runtime.detected is not None
    on_host = signals[RUNTIME]
    assert on_host.version == runtime.detected.text and "2.4.2" in on_host.version
    assert (True, on_host.reason) == runtime.containerd.loaded()  # the running daemon has the metax handler
    assert runtime_agent.service(runtime).restarts == 1  # one restart: the first round's
    assert Path(containerd.dropin_path(str(n.node.containerd_layout.config), 3)).is_file()


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
