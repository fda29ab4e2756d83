"""topo-worker's round: PCI functions, mx-smi's links and health, the NICs, the devices pods hold → `document.build`
→ the node's topology document and HAMi's scores/losses (`placement.hami_annotations`) → a patch of what differs.

The free set is the node's healthy GPUs that no pod holds, as kubelet's PodResources API lists them (a VF or an
sGPU share held makes its GPU not free); when that API cannot be read, the last answer is kept (none held
before the first). mx-smi failing keeps the last links and health it read; the PCI inventory failing keeps the
annotations as they are. A round that changes nothing writes nothing (steady state is quiet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import ClusterError, HardwareError, InvalidSpec, PortError
from metax_core.inventory import FunctionKind, GpuHealth, GpuLink, NetworkInterface, PciAddress
from metax_core.node import devices
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.topology import document, placement
from services._agent import base, cluster
from services.topo_worker.config import Settings

log = logging.getLogger(__name__)

COMPONENT = "topo-worker"
HeldDevices = Callable[[], Mapping[str, Sequence[str]]]


@attrs.frozen
class Hardware:
    devices: hardware.DeviceInventory
    monitor: hardware.GpuMonitor
    topology: hardware.GpuTopology
    network: hardware.NetworkInterfaces
    held: HeldDevices = dict
    """kubelet's PodResources: resource name → device IDs pods hold (production: `bootstrap.pod_resources`)."""

    @classmethod
    def of(cls, host: Any, held: HeldDevices | None = None) -> Hardware:
        return cls(host.devices, host.monitor, host.monitor, host.network, held or (dict))


def published(doc: document.NodeTopology) -> dict[str, str | None]:
    """Everything topo-worker publishes for ``doc`` (scores and losses absent when no GPU is free)."""
    out: dict[str, str | None] = {document.TOPOLOGY: document.encode(doc)}
    if doc.free:
        out.update(placement.hami_annotations(doc))
    else:
        out.update({document.SCORES: None, document.LOSSES: None})
    return out


class TopoWorker(base.NodeAgentBase):
    name = COMPONENT

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # No readiness signal (board None): nothing on the node waits for topology (gpu-device falls back to its
        # inventory).
        super().__init__(settings, COMPONENT, ports=ports, board=None, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self._links: tuple[GpuLink, ...] = ()
        self._health: Mapping[PciAddress, GpuHealth] = {}
        self._held: Mapping[str, Sequence[str]] = {}

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        if self.uninstall():
            return
        doc = self.gather()
        if doc is None:
            self.probe.not_ready()
            return
        try:
            wanted = published(doc)
        except InvalidSpec as exc:
            self.say("document", f"cannot publish the topology: {exc}", logging.ERROR)
            self.probe.not_ready()
            return
        try:
            node = self.publisher.node()
            if node is None:
                self.say("node", f"node {self.settings.node_name} not found: nothing to annotate", logging.WARNING)
                self.probe.not_ready()
                return
            self.publisher.metadata(node, annotations=wanted)
        except ClusterError as exc:
            self.say("publish", f"cannot annotate node {self.settings.node_name}: {exc}", logging.WARNING)
            self.probe.not_ready()
            return
        self.say("publish", f"topology of {len(doc.gpus)} GPU(s), {len(doc.free)} free, {len(doc.nics)} NIC(s)")
        self.probe.ready("topology published")

    def uninstall(self) -> bool:
        """When the finalizer asks, stop publishing: it removes every product key of the Node itself, and an
        agent writing them back would leave them behind. topo-worker undoes nothing on the host, so it is not
        one of the agents that answer (`metax_core.node.uninstall.AGENTS`)."""
        node = self.publisher.node_or_none(self.say)
        if self.uninstalling.check(node) is None:
            return False
        self.probe.not_ready()
        self.say("uninstall", "uninstall asked: no longer publishing the topology")
        return True

    def gather(self) -> document.NodeTopology | None:
        try:
            functions = tuple(self.hw.devices.functions())
        except HardwareError as exc:
            self.say("inventory", f"cannot read the GPU inventory, keeping the topology: {exc}", logging.WARNING)
            return None
        try:
            self._links = tuple(self.hw.topology.links())
            self._health = self.hw.monitor.health()
            self.say("smi", "mx-smi answers")
        except HardwareError as exc:
            self.say("smi", f"mx-smi failed, keeping the last links and health: {exc}", logging.WARNING)
        nics: tuple[NetworkInterface, ...] = ()
        try:
            nics = tuple(self.hw.network.interfaces())
        except HardwareError as exc:
            self.say("network", f"cannot list network interfaces, publishing none: {exc}", logging.WARNING)
        try:
            self._held = dict(self.hw.held())
            self.say("held", "kubelet's PodResources answers")
        except PortError as exc:
            self.say(
                "held", f"cannot ask kubelet which GPUs pods hold, keeping the last answer: {exc}", logging.WARNING
            )
        taken = devices.held_gpus(self._held, functions)
        pfs = [f.address for f in functions if f.kind is FunctionKind.PF]
        free = [a for a in pfs if self._health.get(a, GpuHealth(a)).healthy and a not in taken]
        return document.build(functions, self._links, nics, free=free)

    def shutdown(self) -> None:
        """The annotations stay (they describe the hardware); uninstall removes them."""
        self.probe.not_ready()
        log.info("topo-worker stopped")
