"""The container-runtime agent on a real node as a host process (C4), for the real-node tests that drive it round by
round: its service manager there, and the agent built for the node; and the maca agent with its container-edit
service (R-MACA), whose socket the wrapper that agent installs dials. (The product's own path, both agents as the
chart's pods, is tests/e2e/test_product.py's.)

The agents run in the calling process (a test's) with host root ``/`` (the node's files are under its directory,
which the node's mount namespace shares) and their host programs run directly (the node's own containerd binary);
the node's containerd is restarted through its supervisor (`HarnessService`: ``svc -t``, as systemd restarts a
unit on a node)."""

from __future__ import annotations

import pathlib
import threading
import time
from typing import Any

import attrs

from metax_core.ports import node as node_ports
from metax_dev import fake_sdk
from metax_dev.realnode import node
from metax_hw import container_runtime, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_edit import config as edit_config
from services.container_edit import server as edit_server
from services.container_runtime import agent, bootstrap, config
from services.maca import agent as maca_agent
from services.maca import bootstrap as maca_bootstrap
from services.maca import config as maca_config


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


@attrs.define
class SdkSide:
    """The maca agent (its SDK versions installed once) and its container-edit service on ``socket``."""

    maca: maca_agent.Maca
    socket: pathlib.Path
    stop: threading.Event
    service: threading.Thread

    def close(self) -> None:
        self.stop.set()
        self.service.join(10)


def sdk_side(
    work: pathlib.Path, node_name: str, versions: tuple[str, ...], board: node_ports.ReadinessBoard | None = None
) -> SdkSide:
    """The maca agent on its own host root under ``work`` (the SDK versions from fake payload images,
    `metax_dev.fake_sdk`; its readiness on ``board``) and the container-edit service serving those versions."""
    payload, refs = work / "payload", []
    for i, version in enumerate(versions):
        fake_sdk.unpack_payload(fake_sdk.write_payload_image(work / "images", version), payload / str(i))
        refs.append(fake_sdk.reference(version))
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(node_name)
    settings = maca_config.Settings(
        node_name=node_name,
        host_root=work / "host",
        payload_dir=payload,
        payload_images=tuple(refs),  # type: ignore[arg-type]
    )
    maca = maca_bootstrap.bootstrap(settings, ports=cluster.in_memory(k8s, "maca", node_name), board=board)
    maca.tick()
    socket = work / "edit.sock"
    edit_settings = edit_config.Settings(
        host_root=pathlib.Path("/"),
        socket=str(socket),  # type: ignore[arg-type]
        sdk_dir=str(settings.host_path(settings.sdk_dir)),  # type: ignore[arg-type]
        in_use_dir=str(settings.host_path(settings.in_use_dir)),  # type: ignore[arg-type]
    )
    stop = threading.Event()
    service = threading.Thread(target=edit_server.serve, args=(edit_settings, stop), daemon=True)
    service.start()
    deadline = time.monotonic() + 30
    while not socket.exists():
        if time.monotonic() > deadline or not service.is_alive():
            stop.set()
            raise RuntimeError(f"the container-edit service did not listen on {socket}")
        time.sleep(0.01)
    return SdkSide(maca, socket, stop, service)
