"""The demo's in-process stand-ins for what a real node and control plane would run: the DaemonSet controller,
the kubelet (pods → the agents' composition roots), its device manager, and container-runtime.

Why here and not in the product: the in-memory API server (`metax_k8s.inmemory`) stores objects but runs no
controller and no kubelet. Every agent still starts from its pod exactly as the operator rendered it: the
container's environment (downward API, ``$(VAR)``, the ``/host`` and payload mounts rewritten onto the fake
host and a staged payload directory by `metax_dev.processnode`'s own rules) goes through the agent's settings
loader and its composition root (``services/*/bootstrap.py``); only the hardware is the fake host's (the real
`metax_hw` adapters on its root, as `metax_dev.agents` does) and the cluster ports are the in-memory ones.

What stands in, and for what (the demo prints `STAND_INS`):
- `DaemonSets`: the DaemonSet controller (one pod per matching node; OnDelete and RollingUpdate; status);
- `Kubelet`: runs each pod's agent in a thread, Ready while its probe file exists (the rendered exec probe);
- `DeviceManager`: the kubelet's device manager: what gpu-device's plugins offer becomes the node's allocatable,
  allocation takes devices from it (no gRPC: gpu-device's `PluginFactory` seam);
- `RuntimeStandIn`: container-runtime needs a running containerd to configure and restart: it publishes the
  component's readiness signal and answers the uninstall request, as the service tests' stand-in does (on
  the real cluster it is the container-runtime pod's process, `metax_dev.demo.entrypoint`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from metax_core.cluster import workloads
from metax_core.errors import Conflict, NotFound
from metax_core.node import devices, readiness, uninstall
from metax_core.ports import node as node_ports
from metax_core.runtime import container_edit
from metax_hw import hostfiles
from metax_hw_fake import host as fake_host
from metax_k8s.api import Api
from metax_k8s.inmemory import InMemoryCluster
from services._agent import cluster as agent_cluster

log = logging.getLogger(__name__)

STAND_INS = (
    "DaemonSet controller: one pod per matching node, OnDelete/RollingUpdate, status (in-process)",
    "kubelet: each pod's agent runs in a thread from the pod's rendered env; Ready = its exec probe's file",
    "kubelet device manager: gpu-device's plugins offer devices in-process (no gRPC); allocatable from them",
    "container-runtime: no containerd to restart here: a stand-in publishes its readiness and answers uninstall",
    "registry: driver and MXMACA payload images are staged directories (what each image holds at /payload)",
)
TEMPLATE_HASH = "demo.metax-tech.com/template-hash"


def template_hash(template: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def selects(node: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    wanted = (template.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class DaemonSets:
    """The DaemonSet controller's part the operator relies on: pods for matching nodes, and the status."""

    def __init__(self, k8s: InMemoryCluster, namespace: str) -> None:
        self.k8s, self.ns = k8s, namespace

    def sync(self, every_pod: Sequence[Mapping[str, Any]]) -> None:
        """One pass over the DaemonSets, given one list of the cluster's pods."""
        api = self.k8s.api
        nodes = api.list("v1", "Node").items
        pods = {p["metadata"]["name"]: p for p in every_pod if p["metadata"].get("namespace") == self.ns}
        for ds in api.list("apps/v1", "DaemonSet", namespace=self.ns).items:
            name, template = ds["metadata"]["name"], ds["spec"]["template"]
            want_hash = template_hash(template)
            on_delete = (ds["spec"].get("updateStrategy") or {}).get("type") == "OnDelete"
            desired = ready = updated = 0
            for node in nodes:
                node_name = node["metadata"]["name"]
                pod_name = f"{name}-{node_name}"
                pod = pods.pop(pod_name, None)
                if not selects(node, template):
                    if pod is not None:
                        self._delete(pod_name)
                    continue
                desired += 1
                if pod is not None and not on_delete and pod["metadata"]["annotations"].get(TEMPLATE_HASH) != want_hash:
                    self._delete(pod_name)  # RollingUpdate: replaced (maxUnavailable 1 or more)
                    pod = None
                if pod is None:
                    self._create(pod_name, node_name, template, want_hash)
                    continue
                ready += pod_ready(pod)
                updated += pod["metadata"]["annotations"].get(TEMPLATE_HASH) == want_hash
            status = {
                "desiredNumberScheduled": desired,
                "currentNumberScheduled": desired,
                "numberReady": ready,
                "numberAvailable": ready,
                "updatedNumberScheduled": updated,
                "observedGeneration": ds["metadata"].get("generation", 1),
            }
            if {k: (ds.get("status") or {}).get(k) for k in status} != status:
                body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": self.ns}}
                with contextlib.suppress(NotFound):  # deleted since the list (uninstall)
                    api.apply(
                        {**body, "status": status},
                        field_manager="demo-daemonset-controller",
                        force=True,
                        subresource="status",
                    )
        for orphan in pods.values():  # its DaemonSet is gone (uninstall): garbage-collected
            owner = (orphan["metadata"].get("labels") or {}).get(workloads.COMPONENT_LABEL)
            if owner is not None:
                self._delete(orphan["metadata"]["name"])

    def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):  # someone deleted it first (the operator's rollout, its cleanup)
            self.k8s.api.delete("v1", "Pod", name, self.ns)

    def _create(self, pod_name: str, node_name: str, template: Mapping[str, Any], want_hash: str) -> None:
        metadata = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": self.ns,
                "labels": dict(metadata.get("labels") or {}),
                "annotations": {**(metadata.get("annotations") or {}), TEMPLATE_HASH: want_hash},
            },
            "spec": {**template["spec"], "nodeName": node_name},
        }
        with contextlib.suppress(Conflict):  # created by an earlier pass this one did not see yet
            self.k8s.api.create(pod, field_manager="demo-daemonset-controller")


def holdings_by_resource(held: Mapping[tuple[str, str], Sequence[str]]) -> dict[str, list[str]]:
    """(owner pod, resource) → device IDs, as resource → every device ID held (PodResources' view)."""
    found: dict[str, list[str]] = {}
    for (_, resource), ids in held.items():
        found.setdefault(resource, []).extend(ids)
    return found


class DeviceManager:
    """The kubelet's device manager for one node: the devices each plugin offers, allocations, allocatable."""

    def __init__(self, k8s: InMemoryCluster, node: str) -> None:
        self.k8s, self.node = k8s, node
        self.offered: dict[str, tuple[str, ...]] = {}
        self.held: dict[tuple[str, str], list[str]] = {}
        """(owner pod uid, resource) → the device IDs it holds."""
        self.backend: node_ports.AllocationBackend | None = None
        self._written = False
        self._lock = threading.Lock()

    def plugin(self, resource: devices.Resource, backend: node_ports.AllocationBackend) -> node_ports.ResourcePlugin:
        self.backend = backend
        return _Plugin(self, resource.value)

    def holdings(self) -> dict[str, list[str]]:
        """Resource → the device IDs pods hold (what the kubelet's PodResources API answers)."""
        with self._lock:
            return holdings_by_resource(self.held)

    def offer(self, resource: str, ids: Sequence[str] | None) -> bool:
        """What a plugin's ListAndWatch sends; the node's capacity and allocatable are written when they change."""
        with self._lock:
            before = {r: str(len(v)) for r, v in self.offered.items()}
            if ids is None:
                self.offered.pop(resource, None)
            else:
                self.offered[resource] = tuple(ids)
            allocatable = {r: str(len(v)) for r, v in self.offered.items()}
        if allocatable == before and self._written:
            return False
        self._written = True
        status = {"capacity": allocatable, "allocatable": allocatable}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}, "status": status}
        self.k8s.api.apply(body, field_manager="kubelet", force=True, subresource="status")
        return True

    def allocate(self, owner: str, resource: str, count: int) -> devices.ContainerAllocation:
        """Admit ``owner``'s container asking ``count`` of ``resource``: free devices, then the plugin's
        GetPreferredAllocation and Allocate (gpu-device's own answers)."""
        with self._lock:
            taken = {d for (_, r), ids in self.held.items() if r == resource for d in ids}
            free = [d for d in self.offered.get(resource, ()) if d not in taken]
        if len(free) < count or self.backend is None:
            raise container_edit.Refusal(f"{self.node}: {count} {resource} asked, {len(free)} free")
        kind = devices.Resource(resource)
        chosen = list(self.backend.preferred(kind, free, [], count)) or free[:count]
        try:
            answer = self.backend.allocate(kind, chosen)
        except devices.AllocationRefused as exc:
            raise container_edit.Refusal(f"gpu-device refused the allocation: {exc}") from exc
        with self._lock:
            self.held[(owner, resource)] = chosen
        return answer

    def release(self, owner: str) -> None:
        with self._lock:
            for key in [k for k in self.held if k[0] == owner]:
                del self.held[key]


class _Plugin:
    def __init__(self, manager: DeviceManager, resource: str) -> None:
        self.manager, self.resource = manager, resource
        self.running = False
        self.listed: tuple[tuple[str, bool], ...] | None = None

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False
        self.listed = None
        self.manager.offer(self.resource, None)

    def serving(self) -> bool:
        return self.running

    def probe(self) -> bool:
        return self.running

    def register(self) -> None:
        pass

    def update(self, advertised: Sequence[devices.Device]) -> bool:
        """As `metax_k8s.deviceplugin.server.PluginServer.update`: True when the list changed."""
        listed = tuple((d.id, d.healthy) for d in advertised)
        if listed == self.listed:
            return False
        self.listed = listed
        self.manager.offer(self.resource, [d.id for d in advertised if d.healthy])
        return True


class RuntimeStandIn:
    """container-runtime's stand-in: ready once its prerequisites are (the board), answers the uninstall."""

    component = "container-runtime"

    def __init__(self, api: Api, node: str, root: Path, probe_file: Path) -> None:
        self.api, self.node, self.board, self.probe = api, node, hostfiles.FileReadinessBoard(root), probe_file

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.2):
            node = self.api.get("v1", "Node", self.node)
            uid = uninstall.requested(node["metadata"].get("annotations"))
            if uid is not None:  # undone and answered; quiet until its pod goes, even once the request is removed
                self.board.withdraw(self.component)
                self.probe.unlink(missing_ok=True)
                patch = {"metadata": {"annotations": uninstall.render_done(self.component, uninstall.Done(uid))}}
                self.api.merge_patch("v1", "Node", self.node, patch, field_manager="metax-container-runtime")
                stop.wait()
                return
            if not self.probe.exists():
                self.board.publish(readiness.ComponentReadiness(self.component, True, "demo stand-in"))
                self.probe.parent.mkdir(parents=True, exist_ok=True)
                self.probe.write_text("demo stand-in\n")
        self.probe.unlink(missing_ok=True)


def kubelet_socket(root: Path) -> socket.socket:
    """The kubelet's registration socket on the host (gpu-device waits for it); bound, never served."""
    path = root / "var/lib/kubelet/device-plugins/kubelet.sock"
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


Runner = Callable[[threading.Event], None]
AgentFactory = Callable[[Mapping[str, str], "NodeContext"], Runner]


class NodeContext:
    """What a pod's agent on one node is given besides its environment."""

    def __init__(self, k8s: InMemoryCluster, name: str, fake: fake_host.FakeHost, devices: DeviceManager) -> None:
        self.k8s, self.name, self.fake, self.devices = k8s, name, fake, devices

    def ports(self, component: str) -> agent_cluster.ClusterPorts:
        return agent_cluster.in_memory(self.k8s, component, self.name)


def copy_payload(source: Path, target: Path) -> None:
    """What a payload init container does: ``cp -a /payload/. TARGET/``."""
    shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
