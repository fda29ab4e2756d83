"""gpu-label's round: inventory → `labels.node_labels` / `labels.node_annotations` → a patch of what differs.

Every ``interval`` it reads the PCI functions, mx-smi's names, memory and health, the loaded module and the
MetaXLink topology, and publishes every label and annotation it owns (None removes a stale one). mx-smi
failing or hanging keeps the last names, sizes and links it read (labels do not flap on a slow tool);
the PCI inventory failing keeps everything as it is. It never touches keys it does not own (another
writer's labels, the administrator's ``gpu-device.mode``), and a round that changes nothing writes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core import components
from metax_core.errors import ClusterError, HardwareError
from metax_core.inventory import METAX_MODULE, GpuHealth, GpuLink, GpuMetrics, PciAddress
from metax_core.node import devices, labels, publish
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from services._agent import base, cluster
from services._agent import uninstall as agent_uninstall
from services.gpu_label.config import Settings

log = logging.getLogger(__name__)

COMPONENT = components.signal(components.Component.GPU_LABEL)


@attrs.frozen
class Hardware:
    devices: hardware.DeviceInventory
    modules: hardware.KernelModules
    monitor: hardware.GpuMonitor
    topology: hardware.GpuTopology

    @classmethod
    def of(cls, host: Any) -> Hardware:
        return cls(host.devices, host.modules, host.monitor, host.monitor)


class GpuLabel(base.NodeAgentBase):
    name = "gpu-label"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self._metrics: tuple[GpuMetrics, ...] = ()
        self._health: Mapping[PciAddress, GpuHealth] = {}
        self._links: tuple[GpuLink, ...] = ()

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        if self.uninstall():
            return
        inventory = self.gather()
        if inventory is None:
            self.probe.not_ready()
            return
        try:
            node = self.publisher.node()
            if node is None:
                self.say("node", f"node {self.settings.node_name} not found: nothing to label", logging.WARNING)
                self.probe.not_ready()
                return
            qos = devices.settings_from_labels(publish.node_metadata(node)[0]).qos
            self.publisher.metadata(
                node,
                labels=labels.node_labels(inventory),
                annotations=labels.node_annotations(inventory, sgpu_shares=self.settings.sgpu_shares, qos_policy=qos),
            )
        except ClusterError as exc:
            self.say("publish", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)
            self.publisher.signal(False, f"cannot label the node: {exc}")
            self.probe.not_ready()
            return
        self.say("publish", f"labelled {len(labels.gpus(inventory.functions))} GPU(s)")
        self.publisher.signal(True, f"labelled {len(labels.gpus(inventory.functions))} GPU(s)")
        self.probe.ready("labels published")

    def uninstall(self) -> bool:
        """When the finalizer asks: remove the annotations, withdraw the signal, answer; nothing else.

        The labels stay until the finalizer removes every product key: the DaemonSets select nodes by
        ``gpu.installed``, and removing it here would make the DaemonSet controller delete the other agents'
        pods before they undid their part."""
        node = self.publisher.node_or_none(self.say)
        uid = self.uninstalling.check(node)
        if uid is None:
            return False
        self.probe.not_ready()
        if agent_uninstall.answer(self.publisher, node, COMPONENT, uid, annotations=labels.OWNED_ANNOTATIONS):
            self.say("uninstall", "uninstall: annotations removed, readiness withdrawn")
        agent_uninstall.remove_ready_dir(self.settings.host_root)
        return True

    def gather(self) -> labels.NodeInventory | None:
        try:
            functions = tuple(self.hw.devices.functions())
            module = self.hw.modules.state(METAX_MODULE)
        except HardwareError as exc:
            self.say("inventory", f"cannot read the GPU inventory, keeping the labels: {exc}", logging.WARNING)
            return None
        self.say("inventory", f"{len(functions)} MetaX PCI function(s)")
        try:
            self._metrics = tuple(self.hw.monitor.metrics())
            self._health = self.hw.monitor.health()
            self._links = tuple(self.hw.topology.links())
            self.say("smi", "mx-smi answers")
        except HardwareError as exc:
            self.say("smi", f"mx-smi failed, keeping the last names, sizes and health: {exc}", logging.WARNING)
        present = {f.address for f in functions}
        return labels.NodeInventory(
            node_name=self.settings.node_name,
            functions=functions,
            metrics=tuple(m for m in self._metrics if m.address in present),
            health={a: h for a, h in self._health.items() if a in present},
            module=module,
            links=self._links,
        )

    def shutdown(self) -> None:
        """Labels stay (they describe the hardware); uninstall removes them (`labels.removal`)."""
        self.probe.not_ready()
        log.info("gpu-label stopped")
