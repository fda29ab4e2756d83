"""What every node agent keeps beside its own state, made once: its chores' clock, its once-per-state log
lines, where it publishes (its readiness signal and Events, on its Node), its probe file and its uninstall latch.

Why a base: five agents built the same five parts in the same lines (duplicates, issue 20 item 8); a part that
changes (the Publisher's arguments, say) now changes in one place. Every node agent (gpu-device, dra-driver and
the exporter too, issue 43 item 3) subclasses `NodeAgentBase`, calls ``super().__init__`` with its component's
name, and keeps only what is its own; an agent that publishes no signal passes no board, one without API access
`cluster.no_api` ports, which its publisher never calls.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from services._agent import cluster, loop, probe, publish

if TYPE_CHECKING:
    from metax_core.ports import node as node_ports
    from services._agent import uninstall
from services._agent.settings import NodeAgentSettings


class NodeAgentBase:
    """The shared parts; ``wake`` makes a chore due now (what a watch event does), by default its round's."""

    round_chore = "sync"
    """The chore of the agent's round (the exporter's is ``sample``)."""

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

    @functools.cached_property
    def uninstalling(self) -> uninstall.Latch:
        """Its uninstall latch, made at first use: the exporter, which never uninstalls, keeps the uninstall
        protocol's imports (the DRA and spec models) out of its memory (its RSS goal, docs/exporter.md)."""
        from services._agent import uninstall

        return uninstall.Latch()

    def wake(self, chore: str | None = None) -> None:
        self.chores.soon(self.round_chore if chore is None else chore)
