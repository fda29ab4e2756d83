"""The composition root of vfio-manager: real adapters from `Settings`, or the fakes tests pass in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from metax_core.ports import node as node_ports
from services._agent import cluster, watch
from services.vfio_manager import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    """The real adapters; module tools run DIRECT (the image's kmod on the host's /lib/modules, no hostPID)."""
    from metax_hw import host

    return agent.Hardware.of(host.open_host(settings.host_root))


def bootstrap(
    settings: config.Settings,
    *,
    hw: agent.Hardware | None = None,
    ports: cluster.ClusterPorts | None = None,
    board: node_ports.ReadinessBoard | None = None,
    clock: Callable[[], float] | None = None,
) -> agent.VfioManager:
    from metax_hw import hostfiles

    return agent.VfioManager(
        settings,
        hw=hw or production_hardware(settings),
        ports=ports or cluster.production("vfio-manager", settings.node_name),
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        **({"clock": clock} if clock is not None else {}),
    )


def runner(manager: agent.VfioManager) -> Callable[[threading.Event], None]:
    """Run ``manager`` with watches on its Node and metax-vfio-config until the stop event."""
    s = manager.settings
    targets = (
        watch.Target("v1", "Node", s.node_name, None, "sync"),
        watch.Target("v1", "ConfigMap", s.vfio_config, s.namespace, "sync"),
    )
    return watch.runner(manager, manager.ports.objects, targets, resync=s.resync, tick=s.tick)


def build(environ: Mapping[str, str]) -> tuple[agent.VfioManager, Callable[[threading.Event], None]]:
    manager = bootstrap(config.from_env(environ))
    return manager, runner(manager)
