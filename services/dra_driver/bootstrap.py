"""The composition root of dra-driver: the host (sysfs, mx-smi, kmod), the kubelet (PodResources, the DRA gRPC
server), the cluster ports and the claim store, wired into a `DraDriver`. Tests pass fakes for the hardware
and the cluster and keep the real server and store, which work on a temporary host root."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from metax_core.dra import DRIVER
from metax_core.ports import node as node_ports
from services._agent import builder, cluster
from services.dra_driver import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host
    from metax_k8s.podresources import client as podresources

    socket = settings.pod_resources()
    return agent.Hardware.of(host.open_host(settings.host_root), held=lambda: podresources.held_devices(socket))


def kubelet_server(built: agent.DraDriver) -> agent.Server:
    """The DRA gRPC server on the kubelet's plugin directories (`metax_k8s.dra.server`)."""
    from metax_k8s.dra import server

    s = built.settings
    return server.DraPluginServer(
        DRIVER,
        plugin_dir=s.plugin_dir,
        registry_dir=s.registry_dir,
        preparer=built,
        health=built,
        on_registration=built.registration,
        endpoint=s.dra_endpoint,
    )


def claim_store(settings: config.Settings) -> node_ports.ClaimStore:
    from metax_hw import claim_store as store

    return store.HostClaimStore(
        settings.host_path(settings.cdi_dir), settings.checkpoint, settings.host_path(settings.sdk_dir)
    )


def bootstrap(
    settings: config.Settings,
    *,
    hw: agent.Hardware | None = None,
    ports: cluster.ClusterPorts | None = None,
    board: node_ports.ReadinessBoard | None = None,
    files: node_ports.ClaimStore | None = None,
    server_factory: agent.ServerFactory | None = None,
    clock: Callable[[], float] | None = None,
) -> agent.DraDriver:
    from metax_hw import hostfiles

    extra = {} if clock is None else {"clock": clock}
    return agent.DraDriver(
        settings,
        hw=hw if hw is not None else production_hardware(settings),
        ports=ports or cluster.production(agent.COMPONENT, settings.node_name),
        board=board or hostfiles.FileReadinessBoard(settings.host_root),
        files=files or claim_store(settings),
        server_factory=server_factory or kubelet_server,
        **extra,
    )


def runner(built: agent.DraDriver) -> Callable[[threading.Event], None]:
    """Its Node's changes (labels, the uninstall request) make a round due at once."""
    from services._agent import watch

    s = built.settings
    return watch.runner(built, built.ports.objects, (builder.own_node(s),), resync=s.resync, tick=s.tick)


def build(environ: Mapping[str, str]) -> tuple[agent.DraDriver, Callable[[threading.Event], None]]:
    built = bootstrap(config.from_env(environ))
    return built, runner(built)
