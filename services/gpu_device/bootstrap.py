"""The composition root of gpu-device: builds the adapters from `Settings` and wires them into an `Agent`.

Tests pass fakes for the hardware and the cluster (and keep the real plugin servers, CDI file and readiness
board, which work on a temporary host root); production builds the sysfs / mx-smi hardware adapters and the
Kubernetes node adapter. Nothing is built at import time.
"""

from __future__ import annotations

import datetime
import importlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from metax_core import devices, readiness
from metax_core.errors import MetaxError
from metax_core.ports.cluster import NodeMetadata
from metax_core.ports.hardware import DeviceInventory, GpuMonitor
from metax_k8s.deviceplugin import hostfiles, server
from services.gpu_device import agent, config

log = logging.getLogger(__name__)


class AdapterMissing(MetaxError):
    """A production adapter this agent needs is not installed in the image."""


def _load(module: str, name: str) -> Callable[..., Any]:
    try:
        factory: Callable[..., Any] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise AdapterMissing(f"gpu-device needs {module}.{name}, which is not available: {exc}") from exc
    return factory


def production_inventory(settings: config.Settings) -> DeviceInventory:
    tree = _load("metax_hw.sysfs", "HostTree")(settings.host_root)
    inventory: DeviceInventory = _load("metax_hw.pci", "SysfsDeviceInventory")(tree)
    return inventory


def production_monitor(settings: config.Settings) -> GpuMonitor:
    monitor: GpuMonitor = _load("metax_hw.monitor", "SmiGpuMonitor")(settings.host_root)
    return monitor


def production_nodes(settings: config.Settings) -> NodeMetadata:
    nodes: NodeMetadata = _load("metax_k8s.cluster", "K8sNodeMetadata")()
    return nodes


def bootstrap(
    settings: config.Settings | None = None,
    *,
    env: Mapping[str, str] | None = None,
    inventory: DeviceInventory | None = None,
    monitor: GpuMonitor | None = None,
    nodes: NodeMetadata | None = None,
    board: readiness.ReadinessBoard | None = None,
    clock: Callable[[], float] | None = None,
    wall: Callable[[], datetime.datetime] | None = None,
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

    def plugin(resource: devices.Resource, backend: agent.Agent) -> agent.Plugin:
        return server.PluginServer(resource, plugin_dir, backend)

    return agent.Agent(
        settings,
        inventory=inventory or production_inventory(settings),
        monitor=monitor or production_monitor(settings),
        nodes=nodes or production_nodes(settings),
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        cdi_file=hostfiles.CdiSpecFile(settings.host_path(settings.cdi_dir)) if settings.cdi_enabled else None,
        plugin_factory=plugin,
        kubelet=lambda: server.socket_fingerprint(kubelet_socket),
        **extra,
    )
