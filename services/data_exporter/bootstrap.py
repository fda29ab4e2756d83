"""The composition root of data-exporter: its `Recipe` for the shared builder (services._agent.builder).

It watches nothing and has no API access (``cluster.no_api``): the node name comes from the downward API,
the holders from the kubelet's PodResources socket, the telemetry from libmxsml where it is, the host's
mx-smi otherwise (`telemetry_source`).
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from metax_core.errors import HardwareError
from metax_core.metrics import attribution, sources
from metax_core.ports import hardware
from services._agent import builder, cluster
from services.data_exporter import agent, config

if TYPE_CHECKING:
    from metax_hw import pci

log = logging.getLogger(__name__)


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


def telemetry_source(
    paths: Sequence[str], devices: pci.SysfsDeviceInventory, smi: hardware.GpuTelemetry
) -> hardware.GpuTelemetry:
    """libmxsml from the first of ``paths`` that exists (`metax_core.metrics.sources`), else ``smi``; decided
    once, at start, and logged. A library that is there but fails to load or initialise falls back to mx-smi."""
    choice = sources.choose(paths, {p for p in sources.check(paths) if os.path.isfile(p)})
    if choice.library is not None:
        from metax_hw import mxsml

        try:
            library = mxsml.open_library(choice.library)
        except HardwareError as exc:
            choice = sources.fallback(choice.library, str(exc))
            log.warning("%s", choice.why)
            return smi
        log.info("%s", choice.why)
        return mxsml.MxSmlMonitor(library, devices)
    log.info("%s", choice.why)
    return smi


def production_hardware(settings: config.Settings) -> agent.Sources:
    from metax_hw import gpus

    smi = gpus.open_monitor(settings.host_root)
    return agent.Sources(
        gpus=telemetry_source(sources.candidates(str(settings.host_root), settings.mxsml_library), smi.devices, smi),
        pods=pod_devices(settings.pod_resources()),
    )


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
