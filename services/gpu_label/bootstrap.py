"""The composition root of gpu-label: real adapters from `Settings`, or the fakes tests pass in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from metax_core.ports import node as node_ports
from services._agent import cluster, watch
from services.gpu_label import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host

    return agent.Hardware.of(host.open_host(settings.host_root))


def bootstrap(
    settings: config.Settings,
    *,
    hw: agent.Hardware | None = None,
    ports: cluster.ClusterPorts | None = None,
    board: node_ports.ReadinessBoard | None = None,
    clock: Callable[[], float] | None = None,
) -> agent.GpuLabel:
    from metax_hw import hostfiles

    return agent.GpuLabel(
        settings,
        hw=hw or production_hardware(settings),
        ports=ports or cluster.production("gpu-label", settings.node_name),
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        **({"clock": clock} if clock is not None else {}),
    )


def runner(labeller: agent.GpuLabel) -> Callable[[threading.Event], None]:
    """Run ``labeller`` with a watch on its Node until the stop event."""
    s = labeller.settings
    targets = (watch.Target("v1", "Node", s.node_name, None, "sync"),)
    return watch.runner(labeller, labeller.ports.objects, targets, resync=s.resync, tick=s.tick)


def build(environ: Mapping[str, str]) -> tuple[agent.GpuLabel, Callable[[threading.Event], None]]:
    labeller = bootstrap(config.from_env(environ))
    return labeller, runner(labeller)
