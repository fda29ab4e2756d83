"""gpu-discovery: which nodes have MetaX GPUs, found without privilege on every node (issue 38 item 3, R-SECURITY).

Why a workload of its own: gpu-label reads mx-smi (names, memory, health, MetaXLink), which needs the GPUs' device
nodes, so it is privileged; running it on every node put a privileged pod next to etcd and the cluster CA on the
control plane. Finding the GPUs needs no privilege: ``/sys/bus/pci/devices/*/vendor`` is world-readable. So this
agent runs everywhere, unprivileged (no capability, read-only root, ``/sys`` read-only, no host path written, no
readiness board), and writes one label, ``metax-tech.com/gpu.installed``, on its own node; gpu-label and every other
node agent select on it and run only where it is set. On a node without MetaX GPUs it removes every label the
GPU components own (a node whose GPUs went: the labeller's pod is gone with the label, its labels with it).

Every ``interval``: the PCI functions (`metax_hw.pci.SysfsDeviceInventory`), `labels.discovery_labels`, a patch of
what differs (none in steady state). A sysfs read that fails keeps the labels as they are. While the uninstall
request is on its Node it does nothing: the finalizer removes every product key at the end, and removing
``gpu.installed`` earlier would make the DaemonSet controller delete the other agents' pods before they undid
their part (services/gpu_label/agent.py says the same of gpu-label).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from metax_core.errors import ClusterError, HardwareError
from metax_core.node import labels
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from services._agent import base, builder, cluster
from services.gpu_label.config import Settings, from_env

log = logging.getLogger(__name__)

COMPONENT = "gpu-discovery"
"""Its name in logs, Events and as the Node's field manager (not a readiness signal: it publishes none)."""


@attrs.frozen
class Hardware:
    devices: hardware.DeviceInventory


class Discovery(base.NodeAgentBase):
    name = COMPONENT

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=None, log=log, clock=clock)
        self.settings = settings
        self.hw = hw

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        node = self.publisher.node_or_none(self.say)
        if node is None:
            self.probe.not_ready()
            return
        if self.uninstalling.check(node) is not None:
            self.say("uninstall", "uninstall requested: labels left to the finalizer")
            self.probe.not_ready()
            return
        try:
            functions = tuple(self.hw.devices.functions())
        except HardwareError as exc:
            self.say("inventory", f"cannot read the PCI functions, keeping the labels: {exc}", logging.WARNING)
            self.probe.not_ready()
            return
        found = len(labels.gpus(functions))
        try:
            self.publisher.metadata(node, labels=labels.discovery_labels(functions))
        except ClusterError as exc:
            self.say("publish", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)
            self.probe.not_ready()
            return
        self.say("publish", f"{found} MetaX GPU(s) on this node" if found else "no MetaX GPU on this node")
        self.probe.ready("labels published")

    def shutdown(self) -> None:
        self.probe.not_ready()
        log.info("gpu-discovery stopped")


def production_hardware(settings: Settings) -> Hardware:
    from metax_hw import pci, sysfs

    return Hardware(pci.SysfsDeviceInventory(sysfs.mounted_tree(settings.host_root, None)))


def _watches(s: Settings) -> Any:
    return (builder.own_node(s),)


RECIPE = builder.Recipe(
    component=COMPONENT,
    settings=from_env,
    hardware=production_hardware,
    agent=Discovery,
    watches=_watches,
)
