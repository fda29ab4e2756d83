"""The composition root of data-exporter: its `Recipe` for the shared builder (services._agent.builder).

It watches nothing and has no API access (``cluster.no_api``): the node name comes from the downward API,
the holders from the kubelet's PodResources socket, the telemetry from the host's mx-smi.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from metax_core.metrics import attribution
from services._agent import builder, cluster
from services.data_exporter import agent, config


def pod_devices(socket: pathlib.Path, timeout: float = 2.0) -> agent.PodDevices:
    """The PodResources ``List`` as held devices (one short-lived channel per call: the kubelet restarts)."""
    from metax_k8s.podresources import client

    def held() -> Sequence[attribution.HeldDevices]:
        with client.PodResourcesClient(socket, timeout=timeout) as api:
            pods = api.list()
        return [
            attribution.HeldDevices(attribution.Holder(p.namespace, p.name, c.name), d.resource, d.ids)
            for p in pods
            for c in p.containers
            for d in c.devices
        ]

    return held


def production_hardware(settings: config.Settings) -> agent.Sources:
    from metax_hw import host

    return agent.Sources(gpus=host.open_host(settings.host_root).monitor, pods=pod_devices(settings.pod_resources()))


RECIPE = builder.Recipe(
    component="data-exporter",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.DataExporter,
    watches=lambda s: (),
    cluster_ports=cluster.no_api,
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
