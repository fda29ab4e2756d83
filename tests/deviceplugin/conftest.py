"""A node for gpu-device tests: a temporary host root, fake GPUs and node labels, real readiness files,
a test kubelet on real unix sockets, and the real agent (bootstrapped with those fakes) in a thread."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from metax_core.inventory import PciFunction
from metax_core.node import readiness
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from services.gpu_device import agent as agent_module
from services.gpu_device import bootstrap, config

from .fakes import FakeInventory, FakeMonitor, FakeNodeMetadata, gpu

NODE = "node-a"
FAST = {
    "tick": 0.01,
    "healthy_interval": 0.05,
    "label_interval": 0.05,
    "readiness_interval": 0.05,
    "inventory_interval": 0.05,
    "probe_interval": 0.2,
    "cdi_grace": 0.2,
}


def four_gpus() -> list[PciFunction]:
    """Two NUMA nodes, each with one PCIe switch holding two GPUs."""
    return [
        gpu(0x09, numa=0, path=(0x01, 0x02)),
        gpu(0x0A, numa=0, path=(0x01, 0x02)),
        gpu(0x89, numa=1, path=(0x81, 0x82)),
        gpu(0x8A, numa=1, path=(0x81, 0x82)),
    ]


class Clock:
    """A monotonic clock that moves only when a test sets ``now`` (the agent's ``tick`` driven by hand)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@attrs.define
class Node:
    root: pathlib.Path
    inventory: FakeInventory
    monitor: FakeMonitor
    labels: FakeNodeMetadata
    board: hostfiles.FileReadinessBoard
    kubelet: Kubelet
    agent: agent_module.Agent | None = None
    held: dict[str, list[str]] = attrs.field(factory=dict)
    """What the kubelet's PodResources says pods hold (resource → device IDs); tests set it."""
    _thread: threading.Thread | None = None
    _stop: threading.Event = attrs.field(factory=threading.Event)
    _error: list[BaseException] = attrs.field(factory=list)

    @property
    def plugin_dir(self) -> pathlib.Path:
        return self.root / "var/lib/kubelet/device-plugins"

    @property
    def cdi_path(self) -> pathlib.Path:
        return self.root / "var/run/cdi/metax-tech.com-gpu.json"

    def settings(self, **overrides: Any) -> config.Settings:
        return config.Settings(node_name=NODE, host_root=self.root, **{**FAST, **overrides})

    def start(self, **overrides: Any) -> agent_module.Agent:
        self.agent = bootstrap.bootstrap(
            self.settings(**overrides),
            inventory=self.inventory,
            monitor=self.monitor,
            nodes=self.labels,
            board=self.board,
            held=lambda: self.held,
        )
        self._stop.clear()

        def run() -> None:
            assert self.agent is not None
            try:
                self.agent.run(self._stop)
            except BaseException as exc:  # surfaced by stop_agent
                self._error.append(exc)

        self._thread = threading.Thread(target=run, name="gpu-device-agent", daemon=True)
        self._thread.start()
        return self.agent

    def stop_agent(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=15)
            assert not self._thread.is_alive(), "agent did not stop"
            self._thread = None
        if self._error:
            raise self._error[0]

    def restart_kubelet(self, *, wipe_sockets: bool = True) -> Kubelet:
        self.kubelet.stop()
        self.kubelet = Kubelet(self.plugin_dir).start(wipe_sockets=wipe_sockets)
        return self.kubelet

    def set_ready(self, component: str, ready: bool = True, reason: str = "") -> None:
        self.board.publish(readiness.ComponentReadiness(component, ready, reason))


@pytest.fixture
def node() -> Iterator[Node]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    inventory = FakeInventory(four_gpus())
    board = hostfiles.FileReadinessBoard(root)
    n = Node(
        root=root,
        inventory=inventory,
        monitor=FakeMonitor(inventory),
        labels=FakeNodeMetadata(NODE),
        board=board,
        kubelet=Kubelet(root / "var/lib/kubelet/device-plugins").start(),
    )
    for component in config.default_required():
        n.set_ready(component)
    try:
        yield n
    finally:
        try:
            n.stop_agent()
        finally:
            n.kubelet.stop()
            shutil.rmtree(root, ignore_errors=True)
