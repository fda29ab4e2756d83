"""The demo's real cluster: the Go-built control plane, process nodes standing for GPU nodes, kwok CPU nodes.

Why a module of its own: `metax-dev demo --cluster real` plays the same scenario (`scenario`) on the loopback
control plane of `metax_dev.controlplane` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok) instead of the in-memory API server, with nothing of the cluster played in-process:

- the operator runs as a process from its composition root (`metax_dev.operatorprocess`, as the operator
  integration tests run it), with an admin kubeconfig;
- the real DaemonSet controller creates the agents' pods; each GPU node is a process node
  (`metax_dev.processnode`, docs/processnode.md) with stand-ins for a GPU node: its own fake GPU host, the
  payload images as staged directories, and an entrypoint per image (`metax_dev.demo.entrypoint`): every
  agent runs as its pod's process, with the pod's ServiceAccount and RBAC, its rendered exec probe deciding
  Ready;
- gpu-device registers its plugins over real gRPC with a test kubelet on the fake host; the node's
  allocatable and a GPU pod's allocation come from there (`metax_dev.demo.devices`);
- kwok CPU nodes (no GPU): kwok "runs" gpu-discovery's pod there (the one workload on every node); its process
  runs beside it, as a kubelet would run it, against a fake host without GPUs, and labels nothing.

The CR gets a global ``podTemplateSpec`` (`Fleet.pod_template`): a toleration of the process nodes' taint and
a nodeSelector of this fleet's label, so the agents land on the demo's nodes only (a session control plane
shared with tests has other nodes).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metax_core import components
from metax_core.cluster import workloads
from metax_core.components import Component
from metax_core.errors import ClusterError, Conflict
from metax_core.spec import model as spec
from metax_core.wire import operator_env
from metax_dev import agents, devicekubelet
from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import devices, entrypoint, intervals, scenario, workload
from metax_dev.demo import fleet as demo_fleet
from metax_dev.operatorprocess import OperatorProcess
from metax_dev.processnode import node as processnode
from metax_dev.processnode import standins as process_standins
from metax_hw_fake import builder
from metax_k8s import client, crd
from metax_k8s import objects as k8s_objects

log = logging.getLogger(__name__)

NAMESPACE = demo_fleet.NAMESPACE
FLEET_LABEL = "metax.dev/demo-fleet"
"""The demo's nodes carry it; the CR's podTemplateSpec selects it."""
CPU_NODES = 2
DRIVER_READY_TIMEOUT = "30"
"""METAX_DRIVER_READY_TIMEOUT: each node's pods are processes here, and the probe looks every 5 s."""
AGENT_OF = {
    Component.GPU_LABEL: "gpu-label",
    Component.DRIVER: "driver-manager",
    Component.VFIO_MANAGER: "vfio-manager",
    Component.GPU_DEVICE: "gpu-device",
    Component.MACA: "maca",
    Component.RUNTIME: entrypoint.RUNTIME,
}
"""What each node component's image runs (`metax_dev.demo.entrypoint`)."""
CONTAINER_EDIT = "container-edit"
DISCOVERY = "gpu-discovery"
"""What gpu-discovery's image runs, on GPU and CPU nodes alike."""


def entrypoints() -> dict[str, tuple[str, ...]]:
    """Image name → the argv its entrypoint runs on a demo GPU node (docs/processnode.md, "Stand-ins")."""
    run = (sys.executable, "-m", "metax_dev.demo.entrypoint")
    found: dict[str, tuple[str, ...]] = {
        next(w.name for w in components.BY_COMPONENT[c].workloads if w.publishes_readiness): (*run, name)
        for c, name in AGENT_OF.items()
    }
    found[components.GPU_DISCOVERY.name] = (*run, DISCOVERY)
    found[process_standins.repository(scenario.WORKLOAD_IMAGE)] = (*run, entrypoint.WORKLOAD)
    return found


class RealGpuNode(demo_fleet.GpuNode):
    """A process node standing for a GPU node: its fake host, its test kubelet, the pods' processes."""

    def __init__(
        self,
        plane: controlplane.ControlPlane,
        api: client.HttpApi,
        name: str,
        gpus: int,
        workdir: Path,
        payloads: Mapping[str, Path],
        fleet_id: str,
    ) -> None:
        fake = builder.FakeHostBuilder().gpus(gpus).host_driver(demo_fleet.HOST_DRIVER).build(workdir / "host")
        super().__init__(name, gpus, fake)
        self.kubelet = devicekubelet.Kubelet(fake.root / "var/lib/kubelet/device-plugins").start()  # there before
        self.manager = devices.KubeletDevices(api, name, self.kubelet)
        self.devices = self.manager
        self.workloads = workload.Workloads(self.manager)
        self.remember()
        stand_ins = process_standins.StandIns(
            host_root=fake.root, entrypoints=entrypoints(), payloads=payloads, tool_dirs=(fake.bin_dir,)
        )
        self.process = processnode.ProcessNode.for_control_plane(
            plane, workdir / "node", name=name, labels={FLEET_LABEL: fleet_id}, stand_ins=stand_ins
        )

    def edit_env(self, pods: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
        """The environment the node's container-edit runs with (its maca pod's), None while it runs none."""
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if (
                labels.get(workloads.COMPONENT_LABEL) != Component.MACA.value
                or pod["spec"].get("nodeName") != self.name
            ):
                continue
            found = self.process.worker(NAMESPACE, pod["metadata"]["name"])
            for c in found.containers if found is not None else []:
                if c.name == CONTAINER_EDIT and c.plan is not None and c.popen is not None:
                    return dict(c.plan.env)
        return None

    def sync(self, every_pod: Sequence[Mapping[str, Any]]) -> None:
        """The device manager's round: allocatable, and the users' GPU pods bound here admitted or released."""
        self.manager.sync()
        mine = [
            p
            for p in every_pod
            if p["metadata"].get("namespace") != NAMESPACE
            and p["spec"].get("nodeName") == self.name
            and not p["metadata"].get("deletionTimestamp")
        ]
        self.workloads.forget({p["metadata"]["uid"] for p in mine})
        for pod in mine:
            uid = pod["metadata"]["uid"]
            if uid not in self.workloads.started and uid not in self.workloads.refused:
                self.workloads.admit(pod, self.edit_env(every_pod))

    def stop(self) -> None:
        self.process.stop()
        self.manager.stop()


class KwokCpuNode(demo_fleet.HostNode):
    """A kwok node without GPUs: kwok marks its pods Running; gpu-discovery's process runs beside its pod."""

    def __init__(self, name: str, workdir: Path, kubeconfig: Path) -> None:
        super().__init__(name, 0, builder.FakeHostBuilder().gpus(0).host_driver(None).build(workdir / "host"))
        self.remember()
        self.workdir = workdir
        payload = agents.write_payload(workdir / "payload")
        env = agents.environment(self.fake, node_name=name, kubeconfig=kubeconfig, namespace=NAMESPACE, payload=payload)
        self.env = {**env, **intervals.FAST}
        self.agent: subprocess.Popen[bytes] | None = None

    def sync(self, every_pod: Sequence[Mapping[str, Any]]) -> None:
        """gpu-discovery's process runs while its pod is on this node, as a kubelet runs a pod's container."""
        running = any(
            p["spec"].get("nodeName") == self.name
            and (p["metadata"].get("labels") or {}).get(workloads.APP_LABEL) == components.GPU_DISCOVERY.name
            and not p["metadata"].get("deletionTimestamp")
            for p in every_pod
        )
        if running and self.agent is None:
            with (self.workdir / f"{DISCOVERY}.log").open("ab") as out:
                self.agent = subprocess.Popen(
                    agents.command(DISCOVERY),
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        elif not running and self.agent is not None:
            self.stop()

    def stop(self) -> None:
        agent, self.agent = self.agent, None
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(20)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(10)


class RealFleet(demo_fleet.Fleet):
    def __init__(
        self, workdir: Path, plane: controlplane.ControlPlane, count: int, *, cpu_nodes: int = CPU_NODES
    ) -> None:
        self.workdir, self.plane = workdir, plane
        self.errors: list[str] = []
        self.deadline = 90.0
        self.fleet_id = uuid.uuid4().hex[:6]
        self.api = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="metax-demo")
        self.objects = k8s_objects.K8sObjects(self.api)
        self.pod_template = {
            "spec": {
                "nodeSelector": {FLEET_LABEL: self.fleet_id},
                "tolerations": [{"key": processnode.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            }
        }
        self.api.apply(crd.crd(), field_manager="helm", force=True)
        with contextlib.suppress(Conflict):
            self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        payloads = demo_fleet.stage_payloads(workdir / "registry")
        taken = {n["metadata"]["name"] for n in self.api.list("v1", "Node").items}
        names = demo_fleet.node_names(count)
        if taken & set(names):  # a shared control plane (tests): names of this fleet's own
            names = [f"gpu-{self.fleet_id}-{i + 1}" for i in range(count)]
        counts = demo_fleet.GPU_COUNTS
        self.nodes: list[RealGpuNode] = [
            RealGpuNode(plane, self.api, name, counts[i % len(counts)], workdir / name, payloads, self.fleet_id)
            for i, name in enumerate(names)
        ]
        prefix = "cpu-node" if not any(n.startswith("cpu-node") for n in taken) else f"cpu-{self.fleet_id}"
        self.kwok_names = plane.add_nodes(cpu_nodes, prefix=prefix) if cpu_nodes else []
        for name in self.kwok_names:
            self.api.merge_patch("v1", "Node", name, {"metadata": {"labels": {FLEET_LABEL: self.fleet_id}}})
        self.cpu_nodes: list[KwokCpuNode] = [
            KwokCpuNode(name, workdir / name, plane.kubeconfig_path) for name in self.kwok_names
        ]
        self.operator: OperatorProcess | None = None
        self._stop = threading.Event()
        self._loop = threading.Thread(target=self._run, name="demo-device-manager", daemon=True)
        self._served()

    def _served(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while True:
            try:
                self.api.list(scenario.CR_API, spec.KIND)
                return
            except ClusterError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def start(self) -> None:
        for n in self.nodes:
            n.process.start()
        for n in self.nodes:
            n.process.wait_ready()
        self.operator = OperatorProcess(
            self.plane.kubeconfig_path,
            "metax-operator-demo",
            self.workdir,
            {operator_env.DRIVER_READY_TIMEOUT: DRIVER_READY_TIMEOUT, operator_env.LEADER_ELECTION: "false"},
            namespace=NAMESPACE,
        )
        self._loop.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                every_pod = self.api.list("v1", "Pod").items
                for n in self.nodes:
                    n.sync(every_pod)
                for c in self.cpu_nodes:
                    c.sync(every_pod)
            except Exception as exc:  # a stand-in's bug must show, not hang the demo
                log.exception("device manager")
                self.errors.append(str(exc))

    def logs(self) -> list[Path]:
        """Where the operator's and the agents' output goes (the process nodes keep a log per container)."""
        found = [self.operator.log_path] if self.operator is not None else []
        return found + [n.process.workdir / "pods" for n in self.nodes] + [c.workdir for c in self.cpu_nodes]

    def stop(self) -> None:
        """Everything this fleet made goes: what an unfinished scenario left in the cluster (while the operator
        and the agents still run to undo it), the operator, the nodes and their processes, the kwok nodes."""
        self._leftovers()
        self._stop.set()
        if self._loop.is_alive():
            self._loop.join(30)
        if self.operator is not None:
            self.operator.stop()
        for n in self.nodes:
            n.stop()
        for c in self.cpu_nodes:
            c.stop()
        for name in self.kwok_names:
            with contextlib.suppress(ClusterError):
                self.api.delete("v1", "Node", name)
            with contextlib.suppress(ValueError):
                self.plane.node_names.remove(name)

    def _leftovers(self, timeout: float = 60.0) -> None:
        with contextlib.suppress(ClusterError):
            self.api.delete("v1", "Pod", "train", "default")
        try:
            self.api.delete(scenario.CR_API, spec.KIND, spec.OBJECT_NAME)
        except ClusterError:
            return  # uninstalled: nothing left
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.get(scenario.CR_API, spec.KIND, spec.OBJECT_NAME) is not None:
            time.sleep(0.5)
        with contextlib.suppress(ClusterError):  # no operator to finalize it: the finalizer goes by hand
            self.api.merge_patch(scenario.CR_API, spec.KIND, spec.OBJECT_NAME, {"metadata": {"finalizers": None}})
        for obj in self.api.list("apps/v1", "DaemonSet", namespace=NAMESPACE).items:
            with contextlib.suppress(ClusterError):
                self.api.delete("apps/v1", "DaemonSet", obj["metadata"]["name"], NAMESPACE)
