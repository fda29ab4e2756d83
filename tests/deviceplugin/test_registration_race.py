"""gpu-device registers exactly once per kubelet socket generation, and its `tick` runs on a fake clock.

A kubelet restart can land anywhere inside one tick. The test kubelet is restarted at a chosen point: between
the kubelet-socket check and the plugin's own-socket check (the race seen against an independent kubelet,
which made the plugin register twice ~0.5 s apart and the second registration tore down the first, working
stream), right after the plugin registered (also by a kubelet that keeps our socket: the race seen in CI, where
the restart finished before the agent's thread ran again and the plugin never registered with the new kubelet),
and between two ticks. In every case the new kubelet sees one registration and keeps its stream. The ticks are
driven by hand with a fake clock: no sleeps decide anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from metax_core.node import devices
from metax_core.ports import node as node_ports
from metax_k8s.deviceplugin import server
from services.gpu_device import agent as agent_module
from services.gpu_device import bootstrap

from .conftest import Clock, Node

GPU = "metax-tech.com/gpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}


class HookedPlugin:
    """The real plugin server, with a hook that can run just before one of its calls."""

    def __init__(self, inner: server.PluginServer, hooks: dict[str, Callable[[], None]]) -> None:
        self.inner = inner
        self.hooks = hooks

    def _hook(self, name: str) -> None:
        hook = self.hooks.pop(name, None)
        if hook is not None:
            hook()

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def serving(self) -> bool:
        self._hook("serving")
        return self.inner.serving()

    def probe(self) -> bool:
        return self.inner.probe()

    def register(self) -> None:
        self.inner.register()
        self._hook("registered")

    def update(self, advertised: Sequence[devices.Device]) -> bool:
        return self.inner.update(advertised)


def start(node: Node, hooks: dict[str, Callable[[], None]], clock: Clock) -> agent_module.Agent:
    def factory(resource: devices.Resource, backend: agent_module.Agent) -> node_ports.ResourcePlugin:
        return HookedPlugin(server.PluginServer(resource, node.plugin_dir, backend), hooks)

    node.agent = bootstrap.bootstrap(
        node.settings(),
        inventory=node.inventory,
        monitor=node.monitor,
        nodes=node.labels,
        board=node.board,
        clock=clock,
        plugin_factory=factory,
    )
    return node.agent


@pytest.mark.parametrize("point", ["serving", "registered", "registered-socket-kept", "between-ticks"])
def test_one_registration_per_kubelet_generation(node: Node, point: str) -> None:
    clock, hooks = Clock(), {}
    restarted: list[object] = []
    if point.startswith("registered"):  # the very first registration is followed at once by a kubelet restart
        wipe = point == "registered"
        hooks["registered"] = lambda: restarted.append(node.restart_kubelet(wipe_sockets=wipe))
    agent = start(node, hooks, clock)
    try:
        agent.tick()
        if not point.startswith("registered"):
            node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
            assert node.kubelet.registered(GPU) == 1
        if point == "between-ticks":
            restarted.append(node.restart_kubelet())
        elif point == "serving":
            hooks[point] = lambda: restarted.append(node.restart_kubelet())
        for _ in range(6):
            clock.now += 1.0
            agent.tick()
        new = node.kubelet
        assert restarted == [new]
        new.wait_for(lambda: new.healthy(GPU) == ALL and new.connected(GPU), what="the new kubelet's stream")
        for _ in range(6):
            clock.now += 1.0
            agent.tick()
        assert new.registered(GPU) == 1, [r.resource_name for r in new.registrations]
        assert new.connected(GPU)
    finally:
        agent.shutdown()


def test_tick_does_only_what_has_come_due_on_the_fake_clock(node: Node) -> None:
    clock = Clock()
    agent = start(node, {}, clock)
    try:
        agent.tick()
        calls = node.monitor.calls
        for _ in range(4):
            agent.tick()  # the clock does not move: nothing comes due
        assert node.monitor.calls == calls
        clock.now += node.settings().healthy_interval
        agent.tick()
        assert node.monitor.calls == calls + 1
    finally:
        agent.shutdown()
