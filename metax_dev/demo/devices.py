"""The kubelet's device manager on a real-cluster demo node: gpu-device's plugins over real gRPC.

Why a module of its own: a process node (docs/processnode.md) runs pods, not a kubelet's device manager. On
`metax-dev demo --cluster real` gpu-device's pod registers its plugins with a test kubelet's Registration
service on the fake host's ``kubelet.sock`` (`metax_dev.devicekubelet`, the one the device-plugin tests use:
real gRPC, ListAndWatch), and this module does the rest of what the kubelet's device manager does that the
scenario needs: the node's ``capacity``/``allocatable`` follow the healthy devices each plugin lists (written
to the Node's status with a field manager of its own, beside the process node's cpu/memory/pods), and a GPU
pod's container gets devices from gpu-device's own ``GetPreferredAllocation`` and ``Allocate`` answers
(`workload.Allocator`).
"""

from __future__ import annotations

import contextlib
import logging
import threading

import grpc

from metax_core.errors import ClusterError
from metax_core.node import devices
from metax_core.runtime import container_edit
from metax_dev import devicekubelet
from metax_dev.demo import standins
from metax_k8s.api import Api

log = logging.getLogger(__name__)

FIELD_MANAGER = "metax-demo-device-manager"
RESOURCES = tuple(r.value for r in devices.Resource)


class KubeletDevices:
    """One node's device manager: allocatable from the plugins' lists, allocations, holdings."""

    def __init__(self, api: Api, node: str, kubelet: devicekubelet.Kubelet) -> None:
        self.api, self.node, self.kubelet = api, node, kubelet
        self.held: dict[tuple[str, str], list[str]] = {}
        """(owner pod uid, resource) → the device IDs it holds."""
        self._written: dict[str, str] | None = None
        self._lock = threading.Lock()

    def offered(self) -> dict[str, list[str]]:
        """Resource → the healthy device IDs its plugin lists now (a plugin that went away offers nothing)."""
        return {r: sorted(self.kubelet.healthy(r)) for r in RESOURCES if self.kubelet.connected(r)}

    def sync(self) -> None:
        """Write the node's capacity and allocatable when the plugins' lists changed."""
        allocatable = {r: str(len(ids)) for r, ids in self.offered().items()}
        if allocatable == self._written:
            return
        status = {"capacity": allocatable, "allocatable": allocatable}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}, "status": status}
        try:
            self.api.apply(body, field_manager=FIELD_MANAGER, force=True, subresource="status")
        except ClusterError as exc:  # the node is going (teardown): the next round says it again
            log.info("%s: allocatable not written: %s", self.node, exc)
            return
        self._written = allocatable

    def allocate(self, owner: str, resource: str, count: int) -> devices.ContainerAllocation:
        with self._lock:
            taken = {d for (_, r), ids in self.held.items() if r == resource for d in ids}
        free = [d for d in self.offered().get(resource, []) if d not in taken]
        if len(free) < count:
            raise container_edit.Refusal(f"{self.node}: {count} {resource} asked, {len(free)} free")
        try:
            chosen = self.kubelet.preferred(resource, free, [], count)
        except grpc.RpcError:  # GetPreferredAllocation is optional for a plugin: the kubelet then picks
            chosen = []
        chosen = chosen or free[:count]
        try:
            answer = self.kubelet.allocate(resource, chosen).container_responses[0]
        except (grpc.RpcError, KeyError) as exc:
            raise container_edit.Refusal(f"gpu-device did not allocate: {exc}") from exc
        with self._lock:
            self.held[(owner, resource)] = list(chosen)
        return devices.ContainerAllocation(
            envs=dict(answer.envs), cdi_devices=tuple(d.name for d in answer.cdi_devices)
        )

    def release(self, owner: str) -> None:
        with self._lock:
            for key in [k for k in self.held if k[0] == owner]:
                del self.held[key]

    def holdings(self) -> dict[str, list[str]]:
        with self._lock:
            return standins.holdings_by_resource(self.held)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kubelet.stop()
