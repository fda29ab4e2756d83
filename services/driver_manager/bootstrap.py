"""The composition root of driver-manager: real adapters from `Settings`, or the fakes tests pass in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from metax_core.ports import node as node_ports
from services._agent import cluster, watch
from services.driver_manager import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host, tools

    mode = tools.ExecMode.HOST if settings.host_module_tools else tools.ExecMode.DIRECT
    return agent.Hardware.of(host.open_host(settings.host_root, module_tools=mode))


def bootstrap(
    settings: config.Settings,
    *,
    hw: agent.Hardware | None = None,
    ports: cluster.ClusterPorts | None = None,
    board: node_ports.ReadinessBoard | None = None,
    clock: Callable[[], float] | None = None,
) -> agent.DriverManager:
    from metax_hw import hostfiles

    return agent.DriverManager(
        settings,
        hw=hw or production_hardware(settings),
        ports=ports or cluster.production("driver-manager", settings.node_name),
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        **({"clock": clock} if clock is not None else {}),
    )


def runner(manager: agent.DriverManager) -> Callable[[threading.Event], None]:
    """Run ``manager`` with watches on its Node and driver-config until the stop event."""
    s = manager.settings
    targets = (
        watch.Target("v1", "Node", s.node_name, None, "sync"),
        watch.Target("v1", "ConfigMap", s.driver_config, s.namespace, "sync"),
    )
    return watch.runner(manager, manager.ports.objects, targets, resync=s.resync, tick=s.tick)


def build(environ: Mapping[str, str]) -> tuple[agent.DriverManager, Callable[[threading.Event], None]]:
    manager = bootstrap(config.from_env(environ))
    return manager, runner(manager)
