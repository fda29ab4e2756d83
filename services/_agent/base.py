"""What every node agent keeps beside its own state, made once: its chores' clock, its once-per-state log
lines, where it publishes (its readiness signal and Events, on its Node), its probe file and its uninstall latch.

Why a base: five agents built the same five parts in the same lines (duplicates, issue 20 item 8); a part that
changes (the Publisher's arguments, say) now changes in one place. An agent subclasses `NodeAgentBase`, calls
``super().__init__`` with its component's signal, and keeps only what is its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from metax_core.ports import node as node_ports
from services._agent import cluster, loop, probe, publish, uninstall
from services._agent.settings import NodeAgentSettings


class NodeAgentBase:
    """The shared parts; ``wake`` makes a chore due now (what a watch event does)."""

    def __init__(
        self,
        settings: NodeAgentSettings,
        component: str,
        *,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        log: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ports = ports
        self.chores = loop.Chores(clock)
        self.say = loop.Say(log)
        self.publisher = publish.Publisher(
            settings.node_name, component, nodes=ports.nodes, events=ports.events, board=board
        )
        self.probe = probe.ProbeFile(settings.probe_file)
        self.uninstalling = uninstall.Latch()

    def wake(self, chore: str = "sync") -> None:
        self.chores.soon(chore)
