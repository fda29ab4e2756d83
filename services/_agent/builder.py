"""The one composition root of a node agent: real adapters from its settings, or the fakes tests pass in.

Why one: gpu-label, driver-manager and vfio-manager had three copies of the same ``bootstrap`` (hardware,
cluster ports, readiness board, clock), ``runner`` (its watches, the shared loop) and ``build`` (settings from
the environment). A component now says only what differs — its name, its settings loader, its production
hardware, its agent class and the objects it watches — in a `Recipe`, and gets the three from it, and its
``__main__`` (`Recipe.main`). An agent with parts of its own beyond hardware and cluster (gpu-device's plugin
servers and CDI file, dra-driver's claim store and kubelet server) names their production builders in
`Recipe.parts`; tests pass their fakes by the same keywords.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs

from services._agent import cluster, loop, watch
from services._agent.settings import NodeAgentSettings

if TYPE_CHECKING:  # the exporter's import path stays without the DRA model (its RSS, docs/exporter.md)
    from metax_core.ports import node as node_ports


class NodeAgent(watch.Wakeable, Protocol):
    """What the skeleton needs of a built agent: its settings and its cluster ports (for the watches)."""

    @property
    def settings(self) -> NodeAgentSettings: ...

    @property
    def ports(self) -> cluster.ClusterPorts: ...


S = TypeVar("S", bound=NodeAgentSettings)
H = TypeVar("H")
A = TypeVar("A", bound=NodeAgent)


@attrs.frozen
class Recipe(Generic[S, H, A]):
    component: str
    """The readiness and Event name (``gpu-label``), also the field manager's suffix (``metax-gpu-label``)."""
    settings: Callable[[Mapping[str, str]], S]
    """The settings loader (``config.from_env``)."""
    hardware: Callable[[S], H]
    """The production hardware adapters (imported only when called: tests pass fakes)."""
    agent: Callable[..., A]
    """The agent class: ``agent(settings, hw=, ports=, board=[, clock=])``."""
    watches: Callable[[S], Sequence[watch.Target]]
    """The objects whose change makes a chore due at once (its Node, its ConfigMaps)."""
    cluster_ports: Callable[[str, str], cluster.ClusterPorts] = cluster.production
    """The cluster ports from (component, node name); `cluster.no_api` for an agent without API access."""
    parts: Mapping[str, Callable[[S], Any]] = attrs.field(factory=dict)
    """The agent's own further parts by keyword, each built from its settings unless the caller passes it."""

    def bootstrap(
        self,
        settings: S,
        *,
        hw: H | None = None,
        ports: cluster.ClusterPorts | None = None,
        board: node_ports.ReadinessBoard | None = None,
        **given: Any,
    ) -> A:
        """The agent on ``settings``: what the caller gives (fakes; None: not given), production for the rest.
        Keywords beyond `parts` (``clock``, ``wall``) go to the agent as they are."""
        from metax_hw import hostfiles

        hw = hw if hw is not None else self.hardware(settings)
        ports = ports or self.cluster_ports(self.component, settings.node_name)
        board = board or hostfiles.FileReadinessBoard(settings.host_root)
        extra = {name: part for name, part in given.items() if part is not None}
        for name, build in self.parts.items():
            if name not in extra:
                extra[name] = build(settings)
        return self.agent(settings, hw=hw, ports=ports, board=board, **extra)

    def runner(self, built: A) -> Callable[[threading.Event], None]:
        """Run ``built`` with its watches until the stop event."""
        s = built.settings
        return watch.runner(built, built.ports.objects, tuple(self.watches(s)), resync=s.resync, tick=s.tick)  # type: ignore[arg-type]

    def build(self, environ: Mapping[str, str]) -> tuple[A, Callable[[threading.Event], None]]:
        """The agent from the environment, and what runs it (``services._agent.loop.main``)."""
        built = self.bootstrap(self.settings(environ))
        logging.getLogger(self.component).info("%s starting on node %s", self.component, built.settings.node_name)
        return built, self.runner(built)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """The agent's ``__main__`` (``metax-<component>``): built from its environment, run until signalled."""
        return loop.main(self.component, self.build, argv)


def own_node(settings: NodeAgentSettings) -> watch.Target:
    """The agent's own Node: its labels and annotations drive every agent's round."""
    return watch.Target("v1", "Node", settings.node_name, None, "sync")


def config_map(name: str, namespace: str) -> watch.Target:
    """One of the operator's ConfigMaps the agent reads (driver-config, metax-vfio-config)."""
    return watch.Target("v1", "ConfigMap", name, namespace, "sync")
