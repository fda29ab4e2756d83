"""The composition root of gpu-device: its `Recipe` for the shared builder (services._agent.builder).

Tests pass fakes for the hardware and the cluster (and keep the real plugin servers, CDI file and readiness
board, which work on a temporary host root); production builds the sysfs / mx-smi hardware adapters and the
Kubernetes node adapter (the agents' shared cluster ports, `services._agent.cluster`: in-cluster config or
$KUBECONFIG; RBAC: get and patch on nodes, for the uninstall answer and the GPU health report, and Events about
its Node). Its own parts beyond those — the plugin servers, the CDI spec file, the kubelet's socket and
PodResources — are the recipe's `parts`. Nothing is built at import time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core.errors import MetaxError
from metax_core.node import devices
from metax_core.ports import node as node_ports
from metax_core.ports.cluster import Events, NodeMetadata
from metax_core.ports.hardware import DeviceInventory, GpuMonitor
from metax_hw import hostfiles
from metax_k8s.deviceplugin import server
from metax_k8s.podresources import client as podresources
from services._agent import builder, cluster
from services.gpu_device import agent, config

log = logging.getLogger(__name__)


class AdapterMissing(MetaxError):
    """A production adapter this agent needs is not installed in the image."""


def production_hardware(settings: config.Settings) -> agent.Hardware:
    """The sysfs inventory and the mx-smi monitor on the host root."""
    try:
        from metax_hw import host
    except ImportError as exc:
        raise AdapterMissing(f"gpu-device needs the hardware adapter (metax_hw): {exc}") from exc
    return agent.Hardware.of(host.open_host(settings.host_root))


def pod_resources_holders(settings: config.Settings) -> agent.HeldDevices:
    """Which devices pods hold, from the kubelet's PodResources API (read-only socket, 000 §1.3.2)."""
    socket = settings.pod_resources()
    return lambda: podresources.held_devices(socket)


def pod_resources_device_holders(settings: config.Settings) -> agent.DeviceHolders:
    """Which pods hold each device, from the same API (for the health report's holders)."""
    socket = settings.pod_resources()
    return lambda: podresources.device_holders(socket)


def cdi_file(settings: config.Settings) -> node_ports.CdiSink | None:
    """The CDI spec file under the host's CDI directory, None when CDI is off."""
    return hostfiles.CdiSpecFile(settings.host_path(settings.cdi_dir)) if settings.cdi_enabled else None


def plugin_servers(settings: config.Settings) -> agent.PluginFactory:
    """One device plugin gRPC server per resource, in the kubelet's device-plugin directory."""
    plugin_dir = settings.host_path(settings.plugin_dir)

    def plugin(resource: devices.Resource, backend: agent.Agent) -> node_ports.ResourcePlugin:
        return server.PluginServer(resource, plugin_dir, backend)

    return plugin


def kubelet_socket(settings: config.Settings) -> agent.KubeletWatch:
    """The kubelet's registration socket's fingerprint (a new one: the kubelet restarted)."""
    socket = settings.host_path(settings.plugin_dir) / server.KUBELET_SOCKET
    return lambda: server.socket_fingerprint(socket)


RECIPE = builder.Recipe(
    component=agent.COMPONENT,
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.Agent,
    watches=lambda s: (),  # its Node's labels are read every label_interval (its RBAC has no watch on nodes)
    parts={
        "cdi_file": cdi_file,
        "plugin_factory": plugin_servers,
        "kubelet": kubelet_socket,
        "held": pod_resources_holders,
        "holders": pod_resources_device_holders,
    },
)
runner = RECIPE.runner
build = RECIPE.build


def bootstrap(
    settings: config.Settings | None = None,
    *,
    env: Mapping[str, str] | None = None,
    inventory: DeviceInventory | None = None,
    monitor: GpuMonitor | None = None,
    nodes: NodeMetadata | None = None,
    events: Events | None = None,
    **given: Any,
) -> agent.Agent:
    """`RECIPE.bootstrap` for ``settings`` (read from ``env``, by default the process environment), taking the
    hardware and cluster ports also as gpu-device's callers pass them: its inventory and monitor (the host's
    for one not given), its Node port and Events (the API server's when no Node port is given)."""
    settings = settings or config.from_env(os.environ if env is None else env)
    hw = given.pop("hw", None)
    if hw is None and (inventory is not None or monitor is not None):
        if inventory is None or monitor is None:
            real = production_hardware(settings)
            inventory, monitor = inventory or real.devices, monitor or real.monitor
        hw = agent.Hardware(inventory, monitor)
    ports = given.pop("ports", None)
    if ports is None and nodes is not None:
        ports = cluster.ClusterPorts(objects=cluster.no_api(agent.COMPONENT, "").objects, nodes=nodes, events=events)
    elif ports is None and events is not None:
        ports = attrs.evolve(cluster.production(agent.COMPONENT, settings.node_name), events=events)
    return RECIPE.bootstrap(settings, hw=hw, ports=ports, **given)
