"""The composition root of gpu-device: builds the adapters from `Settings` and wires them into an `Agent`.

Tests pass fakes for the hardware and the cluster (and keep the real plugin servers, CDI file and readiness
board, which work on a temporary host root); production builds the sysfs / mx-smi hardware adapters and the
Kubernetes node adapter. Nothing is built at import time.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from metax_core.errors import MetaxError
from metax_core.node import devices
from metax_core.ports import node as node_ports
from metax_core.ports.cluster import Events, NodeMetadata
from metax_core.ports.hardware import DeviceInventory, GpuMonitor
from metax_hw import hostfiles
from metax_k8s.deviceplugin import server
from metax_k8s.podresources import client as podresources
from services._agent import cluster
from services.gpu_device import agent, config

log = logging.getLogger(__name__)


class AdapterMissing(MetaxError):
    """A production adapter this agent needs is not installed in the image."""


def production_hardware(settings: config.Settings) -> tuple[DeviceInventory, GpuMonitor]:
    """The sysfs inventory and the mx-smi monitor on the host root."""
    try:
        from metax_hw import host
    except ImportError as exc:
        raise AdapterMissing(f"gpu-device needs the hardware adapter (metax_hw): {exc}") from exc
    hw = host.open_host(settings.host_root)
    return hw.devices, hw.monitor


def production_cluster(settings: config.Settings) -> cluster.ClusterPorts:
    """Its Node and Events on it through the Kubernetes API: the agents' shared cluster ports
    (`services._agent.cluster`, in-cluster config or $KUBECONFIG; RBAC: get and patch on nodes, for the uninstall
    answer and the GPU health report, and Events about its Node)."""
    return cluster.production("gpu-device", settings.node_name)


def pod_resources_holders(settings: config.Settings) -> agent.HeldDevices:
    """Which devices pods hold, from the kubelet's PodResources API (read-only socket, 000 §1.3.2)."""
    socket = settings.pod_resources()
    return lambda: podresources.held_devices(socket)


def pod_resources_device_holders(settings: config.Settings) -> agent.DeviceHolders:
    """Which pods hold each device, from the same API (for the health report's holders)."""
    socket = settings.pod_resources()
    return lambda: podresources.device_holders(socket)


def bootstrap(
    settings: config.Settings | None = None,
    *,
    env: Mapping[str, str] | None = None,
    inventory: DeviceInventory | None = None,
    monitor: GpuMonitor | None = None,
    nodes: NodeMetadata | None = None,
    board: node_ports.ReadinessBoard | None = None,
    clock: Callable[[], float] | None = None,
    wall: Callable[[], datetime.datetime] | None = None,
    plugin_factory: agent.PluginFactory | None = None,
    held: agent.HeldDevices | None = None,
    holders: agent.DeviceHolders | None = None,
    events: Events | None = None,
) -> agent.Agent:
    """An Agent for ``settings`` (read from ``env``, by default the process environment)."""
    settings = settings or config.from_env(os.environ if env is None else env)
    plugin_dir = settings.host_path(settings.plugin_dir)
    kubelet_socket = plugin_dir / server.KUBELET_SOCKET
    extra: dict[str, Any] = {}
    if clock is not None:
        extra["clock"] = clock
    if wall is not None:
        extra["wall"] = wall

    def plugin(resource: devices.Resource, backend: agent.Agent) -> node_ports.ResourcePlugin:
        return server.PluginServer(resource, plugin_dir, backend)

    if inventory is None or monitor is None:
        real_inventory, real_monitor = production_hardware(settings)
        inventory, monitor = inventory or real_inventory, monitor or real_monitor
    if nodes is None:
        ports = production_cluster(settings)
        nodes, events = ports.nodes, events or ports.events
    return agent.Agent(
        settings,
        inventory=inventory,
        monitor=monitor,
        nodes=nodes,
        events=events,
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        cdi_file=hostfiles.CdiSpecFile(settings.host_path(settings.cdi_dir)) if settings.cdi_enabled else None,
        plugin_factory=plugin_factory or plugin,
        kubelet=lambda: server.socket_fingerprint(kubelet_socket),
        held=held or pod_resources_holders(settings),
        holders=holders or pod_resources_device_holders(settings),
        **extra,
    )
