"""The demo's cluster: the in-memory API server, N fake GPU hosts, the operator, and the stand-ins between them.

Why a module of its own: the scenario talks to a cluster the way an administrator does (apply, read, edit),
through `Fleet` (the API, the GPU nodes' hosts, the CPU nodes), whichever cluster runs below; `InMemoryFleet`
is everything that makes that cluster run in one process (the real one: `metax_dev.demo.realfleet`). The
operator is its own composition root (`services.operator.bootstrap`) on the in-memory API server, its settings
as the chart's environment would give them (no leader election for one replica, a driver-ready timeout of
20 s, not 600, so a failed canary is seen within the run). Each node is a fake host (`metax_hw_fake.builder`)
with its kubelet stand-in (`metax_dev.demo.kubelet`), and one loop plays the DaemonSet controller
(`metax_dev.demo.standins`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metax_core.cluster import payloads, workloads
from metax_core.spec import model as spec
from metax_dev import agents as dev_agents
from metax_dev import fake_sdk
from metax_dev.demo import kubelet, standins, workload
from metax_hw_fake import builder, snapshot
from metax_hw_fake import host as fake_host
from metax_k8s import objects as k8s_objects
from metax_k8s.api import Api
from metax_k8s.inmemory import InMemoryCluster
from services.operator import bootstrap, run, settings

log = logging.getLogger(__name__)

NAMESPACE = spec.NAMESPACE
REGISTRY = "registry.example.com/metax"
GPU_COUNTS = (8, 4, 2, 4, 8, 2, 4, 8)
"""Mixed GPU counts, node by node (repeated for more nodes)."""
HOST_DRIVER = "2.18.0"
"""The driver each host had before the operator came (the uninstall puts it back)."""
DRIVER_VERSIONS = ("2.20.0", "2.21.0")
"""The payload driver of the install and of the upgrade."""
MACA_VERSIONS = ("2.18.0.3", "2.18.0.10", "2.9.1")
"""The MXMACA SDK images the CR names (`metax_dev.fake_sdk`)."""


def driver_image(version: str) -> str:
    return payloads.payload_reference(f"driver-image:{version}", None, REGISTRY)


def node_names(count: int) -> list[str]:
    return [f"gpu-node-{i + 1}" for i in range(count)]


def stage_payloads(directory: Path) -> dict[str, Path]:
    """What each payload image holds at ``/payload``, by its reference (the registry stand-in)."""
    staged = {driver_image(v): dev_agents.write_payload(directory / f"driver-{v}", v) for v in DRIVER_VERSIONS}
    for version in MACA_VERSIONS:
        archive = fake_sdk.write_payload_image(directory / "maca-images", version)
        staged[fake_sdk.reference(version)] = fake_sdk.unpack_payload(archive, directory / f"maca-{version}")
    return staged


class HostNode:
    """A node's fake host and its files as they were before install (what uninstall must give back)."""

    def __init__(self, name: str, gpus: int, fake: fake_host.FakeHost) -> None:
        self.name, self.gpus, self.fake = name, gpus, fake

    def remember(self) -> None:
        """Take the snapshot the uninstall step compares with (once what was there before the operator is)."""
        self.before = snapshot.take(self.fake.root)
        self.module_before = (self.fake.module_version("metax"), self.fake.module_params("metax"))

    def changes(self, allowed: Mapping[str, str] | None = None) -> list[str]:
        """What differs on the host since before install (files, modules, devices: /sys and /dev are files),
        besides the ``allowed`` paths (host-root relative path → what it may be)."""
        return snapshot.diff({**self.before, **(allowed or {})}, snapshot.take(self.fake.root))


class GpuNode(HostNode):
    """A GPU node as the scenario sees it: its host, the kubelet device manager's holdings, its GPU pods."""

    devices: workload.Allocator
    workloads: workload.Workloads


class Node(GpuNode):
    """One fake GPU node of the in-memory cluster: its host and its kubelet stand-in."""

    def __init__(self, k8s: InMemoryCluster, name: str, gpus: int, workdir: Path, payloads: Mapping[str, Path]):
        super().__init__(
            name, gpus, builder.FakeHostBuilder().gpus(gpus).host_driver(HOST_DRIVER).build(workdir / name / "host")
        )
        self.socket = standins.kubelet_socket(self.fake.root)  # the kubelet was there before the operator
        self.devices = standins.DeviceManager(k8s, name)
        self.kubelet = kubelet.Kubelet(
            standins.NodeContext(k8s, name, self.fake, self.devices), workdir / name / "pods", payloads, NAMESPACE
        )
        self.workloads = self.kubelet.workloads
        self.remember()
        k8s.add_node(name, labels={"kubernetes.io/hostname": name})


class Fleet:
    """What the scenario and the view read and act on, whichever cluster runs below: the API (`Api`, the
    protocol the in-memory server and the HTTP client share), the GPU nodes with their fake hosts, the CPU
    nodes. `InMemoryFleet` is one process; `metax_dev.demo.realfleet.RealFleet` the Go-built control plane."""

    workdir: Path
    api: Api
    objects: k8s_objects.K8sObjects
    nodes: Sequence[GpuNode]
    cpu_nodes: Sequence[HostNode] = ()
    errors: list[str]
    ns = NAMESPACE
    deadline = 40.0
    """Seconds a step may take to reach its outcome."""
    pod_template: Mapping[str, Any] | None = None
    """The CR's global ``podTemplateSpec`` the cluster needs (None: the chart's default)."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def node(self, name: str) -> GpuNode:
        return next(n for n in self.nodes if n.name == name)

    def settle(self, deadline: float = 30.0) -> None:
        """Return once the operator has seen what is now: here, once the CR has not changed for 2 s."""
        end = time.monotonic() + deadline
        last, since = None, time.monotonic()
        while time.monotonic() < end:
            version = self.cr().get("metadata", {}).get("resourceVersion")
            if version != last:
                last, since = version, time.monotonic()
            elif time.monotonic() - since >= 2.0:
                return
            time.sleep(0.1)
        raise TimeoutError(f"the operator's status did not settle within {deadline:.0f}s")

    # --- what the cluster says ---------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        found = self.objects.get(api_version, kind, name, namespace)
        return None if found is None else dict(found)

    def cr(self) -> dict[str, Any]:
        return self.get(f"{spec.API_GROUP}/{spec.API_VERSION}", spec.KIND, spec.OBJECT_NAME) or {}

    def node_object(self, name: str) -> dict[str, Any]:
        return self.get("v1", "Node", name) or {}

    def pods(self, component: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
        selector = f"{workloads.COMPONENT_LABEL}={component}" if component else None
        found = [dict(p) for p in self.objects.list("v1", "Pod", NAMESPACE, label_selector=selector).items]
        return [p for p in found if node is None or p["spec"].get("nodeName") == node]


class InMemoryFleet(Fleet):
    def __init__(self, workdir: Path, count: int) -> None:
        self.workdir = workdir
        self.k8s = InMemoryCluster()
        self.api, self.objects = self.k8s.api, self.k8s.objects
        self.k8s.install_crd()
        self.k8s.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        self.payloads = stage_payloads(workdir / "registry")
        self.nodes: list[Node] = [
            Node(self.k8s, name, GPU_COUNTS[i % len(GPU_COUNTS)], workdir, self.payloads)
            for i, name in enumerate(node_names(count))
        ]
        self.settings = settings.Settings(
            identity="metax-operator-demo", leader_election=False, driver_ready_timeout=20.0, backoff_base=0.1
        )
        self.operator: run.Operator = bootstrap.bootstrap(self.settings, api=self.k8s.api, watch_seconds=30)
        self.daemonsets = standins.DaemonSets(self.k8s, NAMESPACE)
        self._stop = threading.Event()
        self._loop = threading.Thread(target=self._run, name="demo-stand-ins", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self.operator.start()
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        self._loop.join(30)
        for n in self.nodes:
            n.kubelet.stop_all()
        self.operator.stop()
        for n in self.nodes:
            n.socket.close()

    def settle(self, deadline: float = 30.0) -> None:
        """Return once a reconcile that started after this call has finished (the operator saw what is now)."""
        target = self.operator.reconciles + 1
        self.operator.queue.add(run.KEY)
        end = time.monotonic() + deadline
        while self.operator.completed < target:
            if time.monotonic() > end:
                raise TimeoutError(f"the operator did not reconcile within {deadline:.0f}s")
            time.sleep(0.05)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.daemonsets.sync(self.k8s.api.list("v1", "Pod").items)
                every_pod = self.k8s.api.list("v1", "Pod").items  # after the controller's creations and deletions
                for n in self.nodes:
                    n.kubelet.sync(every_pod)
            except Exception as exc:  # a stand-in's bug must show, not hang the demo
                log.exception("stand-ins")
                self.errors.append(str(exc))


def gpu_total(nodes: Sequence[GpuNode]) -> int:
    return sum(n.gpus for n in nodes)
