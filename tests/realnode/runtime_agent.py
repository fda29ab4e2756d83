"""The container-runtime agent on a real node (C4): its service manager there, and the agent built for the node.

The agent runs in the test process with host root ``/`` (the node's files are under its directory, which the
node's mount namespace shares) and its host programs run directly (the node's own containerd binary); the
node's containerd is restarted through the launcher (`HarnessService`), which runs it as its child as systemd
does on a node."""

from __future__ import annotations

import pathlib
from typing import Any

from metax_dev.realnode import node
from metax_hw import container_runtime, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config


class HarnessService:
    """The service manager of a real node's containerd: the launcher, which runs it as its child."""

    def __init__(self, real: node.RealNode) -> None:
        self.real = real
        self.restarts = 0

    @property
    def name(self) -> str:
        return f"the real node {self.real.name}'s containerd"

    def restart(self, unit: str) -> None:
        assert unit == "containerd"
        self.restarts += 1
        self.real.restart_containerd()


def build(
    real: node.RealNode,
    work: pathlib.Path,
    wrapper_source: pathlib.Path,
    *,
    board: pathlib.Path | None = None,
    ports: cluster.ClusterPorts | None = None,
    **extra: Any,
) -> agent.ContainerRuntime:
    """The agent configuring ``real``'s containerd, its state (toolkit, record) under ``work``; its readiness board
    under ``board`` (a host root: the signal goes to ``<board>/run/metax/ready``; default ``work/board``), its
    cluster ports ``ports`` (default: an in-memory cluster with the node)."""
    settings = config.from_env(
        {},
        node_name=real.name,
        host_root=pathlib.Path("/"),
        runtime="containerd",
        containerd_config=str(real.containerd_layout.config),
        containerd_binary=str(real.bin_dir / "containerd"),
        runtime_socket=str(real.containerd_socket),
        host_namespaces=False,
        wrapper_source=str(wrapper_source),
        toolkit_dir=str(work / "toolkit"),
        state_dir=str(work / "state"),
        **{"interval": 0.0, **extra},  # a round at every tick unless the caller gives an interval
    )
    if ports is None:
        k8s = inmemory.InMemoryCluster()
        k8s.add_node(real.name)
        ports = cluster.in_memory(k8s, "container-runtime", real.name)
    return bootstrap.bootstrap(
        settings,
        hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), HarnessService(real)),
        ports=ports,
        board=hostfiles.FileReadinessBoard(board or work / "board"),
    )


def signal(work: pathlib.Path) -> Any:
    return hostfiles.FileReadinessBoard(work / "board").read_all()["container-runtime"]


def service(runtime: agent.ContainerRuntime) -> HarnessService:
    found = runtime.hw.service
    assert isinstance(found, HarnessService)
    return found
