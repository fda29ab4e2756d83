"""The composition root of dra-driver: its `Recipe` for the shared builder (services._agent.builder) — the host
(sysfs, mx-smi, kmod), the kubelet (PodResources, the DRA gRPC server), the cluster ports and the claim store,
wired into a `DraDriver`. Tests pass fakes for the hardware and the cluster and keep the real server and store,
which work on a temporary host root."""

from __future__ import annotations

from metax_core.dra import DRIVER
from metax_core.ports import node as node_ports
from services._agent import builder
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


RECIPE = builder.Recipe(
    component=agent.COMPONENT,
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.DraDriver,
    watches=lambda s: (builder.own_node(s),),  # its Node's changes (labels, the uninstall request): a round now
    parts={"files": claim_store, "server_factory": lambda s: kubelet_server},
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
