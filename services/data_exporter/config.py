"""data-exporter's settings, from the environment the operator renders (`metax_core.wire.agent_env`)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import attrs

from metax_core.health import verdict
from metax_core.metrics import names, sources
from metax_core.wire import agent_env, host
from services._agent import settings as agent_settings
from services._agent.settings import Interval, Names, Port, Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    sample_interval: Interval = attrs.field(default=Interval(5.0), metadata=env(agent_env.SAMPLE_INTERVAL.name))
    """Seconds between samples of the GPUs and of the kubelet's PodResources (``exporter.sampleInterval``)."""
    exported_pod_labels: bool = attrs.field(default=False, metadata=env(agent_env.EXPORTED_POD_LABELS.name))
    """Holders as ``exported_namespace``/``exported_pod``/``exported_container`` (mx-exporter's spelling)."""
    address: str = attrs.field(default="0.0.0.0", metadata=env("METAX_EXPORTER_ADDRESS"))
    """Where ``/metrics`` listens (the pod's network; the Service's target)."""
    port: Port = attrs.field(default=Port(names.EXPORTER_PORT), metadata=env("METAX_EXPORTER_PORT"))
    """The port of ``/metrics`` (0: any free one, for tests)."""
    pod_resources_socket: pathlib.Path | None = attrs.field(default=None, metadata=env(agent_env.POD_RESOURCES_SOCKET))
    """The kubelet's PodResources socket as this process sees it; default ``<host root>/var/lib/kubelet/
    pod-resources/kubelet.sock`` (mounted read-only, 000 §1.3.2)."""
    mxsml_library: Names = attrs.field(default=Names(sources.DEFAULT_LIBRARIES), metadata=env(sources.SETTING))
    """libmxsml paths to try, as this container sees them (`metax_core.metrics.sources`); empty: mx-smi."""
    tick: Seconds = attrs.field(default=Seconds(0.5), metadata=env(agent_env.TICK))
    health_unknown_grace: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.HEALTH_UNKNOWN_GRACE))
    """Seconds the GPUs' verdicts stand while sampling fails, before every GPU is HealthUnknown (degraded;
    `metax_core.health.verdict`); the same setting as gpu-device's and the DRA driver's."""

    @property
    def health_rules(self) -> verdict.Rules:
        return verdict.Rules(unknown_grace=self.health_unknown_grace)

    def pod_resources(self) -> pathlib.Path:
        if self.pod_resources_socket is not None:
            return self.pod_resources_socket
        return self.host_path(host.POD_RESOURCES_SOCKET)


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
