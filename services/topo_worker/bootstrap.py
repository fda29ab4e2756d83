"""The composition root of topo-worker: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from metax_core.wire import host
from services._agent import builder
from services.topo_worker import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host

    return agent.Hardware.of(host.open_host(settings.host_root), held=pod_resources(settings))


def pod_resources(settings: config.Settings) -> agent.HeldDevices:
    """Which devices pods hold, from kubelet's PodResources API (read-only socket, 000 §1.3.2)."""
    from metax_k8s.podresources import client as podresources

    socket = settings.host_path(host.POD_RESOURCES_SOCKET)
    return lambda: podresources.held_devices(socket)


RECIPE = builder.Recipe(
    component=agent.COMPONENT,
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.TopoWorker,
    watches=lambda s: (builder.own_node(s),),
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
