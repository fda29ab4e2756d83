"""gpu-device's settings, read once from the environment the operator gives the DaemonSet.

Every variable has a production default, so the DaemonSet only sets what differs (NODE_NAME always, from
the downward API). Values go through the agents' one converter (`services._agent.settings`): a bad value
stops the agent at start with a message naming the variable, because a device plugin running on a misread
interval is worse than one that does not start. The default list of required components is the R-DEP
graph's answer for gpu-device (`metax_core.components.requirements`), not a copy of it.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import NewType

import attrs

from metax_core import components
from metax_core.health import verdict
from metax_core.node import devices, readiness
from metax_core.wire import agent_env, host
from services._agent import settings as agent_settings
from services._agent.settings import Components, HostPath, Seconds, env

Shares = NewType("Shares", int)
"""sGPUs per GPU, 1 to 1024."""


def _shares(text: object, _: object) -> int:
    word = str(text).strip()
    if not word.isdigit() or not 1 <= int(word) <= 1024:
        raise ValueError(f"must be an integer from 1 to 1024, got {text!r}")
    return int(word)


agent_settings.CONVERTER.register_structure_hook(Shares, _shares)


def _zero_is_never(value: Seconds | None) -> Seconds | None:
    return value if value else None


def _required() -> Components:
    return Components(default_required())


def default_required() -> tuple[str, ...]:
    """What gpu-device waits for when every component is deployed (R-DEP + the driver, R-READY)."""
    return components.required_signals(components.Component.GPU_DEVICE)


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    """The agents' common settings (node, host root, namespace, probe file, loop pace) plus gpu-device's own."""

    plugin_dir: HostPath = attrs.field(
        default=HostPath(host.DEVICE_PLUGINS_DIR), metadata=env("METAX_DEVICE_PLUGIN_DIR")
    )
    cdi_dir: HostPath = attrs.field(default=HostPath(host.CDI_DIR), metadata=env(agent_env.CDI_DIR))
    healthy_interval: Seconds = attrs.field(default=Seconds(5.0), metadata=env(agent_env.HEALTHY_INTERVAL.name))
    """Seconds between health checks (chart gpuDevice.healthyInterval); 0 disables them."""
    sgpu_shares: Shares = attrs.field(default=Shares(devices.DEFAULT_SHARES), metadata=env(agent_env.SGPU_SHARES.name))
    cdi_enabled: bool = attrs.field(default=True, metadata=env("METAX_CDI"))
    cdi_grace: Seconds = attrs.field(default=Seconds(30.0), metadata=env("METAX_CDI_GRACE"))
    """Seconds a withdrawn device's CDI entry stays after it was last advertised or allocated, when no pod
    holds it (`metax_core.node.cdi_sync`)."""
    pod_resources_socket: pathlib.Path | None = attrs.field(default=None, metadata=env(agent_env.POD_RESOURCES_SOCKET))
    """The kubelet's PodResources socket as this process sees it; default ``<host root>/var/lib/kubelet/
    pod-resources/kubelet.sock``. Tells which withdrawn devices pods still hold."""
    required_components: Components = attrs.field(factory=_required, metadata=env(readiness.REQUIRED_ENV))
    """Default: what R-DEP makes gpu-device wait for (the agents' default is none)."""
    label_interval: Seconds = attrs.field(default=Seconds(5.0), metadata=env(agent_env.LABEL_INTERVAL))
    readiness_interval: Seconds = attrs.field(default=Seconds(2.0), metadata=env(agent_env.READINESS_INTERVAL))
    inventory_interval: Seconds = attrs.field(default=Seconds(10.0), metadata=env(agent_env.INVENTORY_INTERVAL))
    readiness_max_age: Seconds | None = attrs.field(
        default=None, converter=_zero_is_never, metadata=env("METAX_READINESS_MAX_AGE")
    )
    """Seconds after which a "ready" signal counts as stale; unset or 0: never."""
    probe_interval: Seconds = attrs.field(default=Seconds(10.0), metadata=env("METAX_PROBE_INTERVAL"))
    """Seconds between checks that each plugin server still answers (not the pod's readinessProbe)."""
    tick: Seconds = attrs.field(default=Seconds(0.5), metadata=env(agent_env.TICK))
    health_unknown_grace: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.HEALTH_UNKNOWN_GRACE))
    """Seconds the GPUs' verdicts stand while the health tool does not answer, before every GPU is HealthUnknown
    (degraded; `metax_core.health.verdict`)."""

    @property
    def health_rules(self) -> verdict.Rules:
        return verdict.Rules(unknown_grace=self.health_unknown_grace)

    """How often the loop wakes to look at kubelet's socket and at what has come due (faster than the agents')."""

    def pod_resources(self) -> pathlib.Path:
        if self.pod_resources_socket is not None:
            return self.pod_resources_socket
        return self.host_path(host.POD_RESOURCES_SOCKET)


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    """Settings from environment variables; InvalidSpec lists every bad one."""
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
