"""dra-driver's settings, from the environment the operator renders (`metax_core.cluster.workloads`).

Like gpu-device's (`services.gpu_device.config`): every variable has a production default, a bad value stops
the agent at start naming the variable, and the required components are the R-DEP graph's answer for the
device allocator, so a DRA node waits for the same driver, runtime and SDK signals as a device-plugin node.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import attrs

from metax_core import components
from metax_core.dra import DRIVER
from metax_core.health import verdict
from metax_core.node import readiness
from metax_core.runtime import sdk
from metax_core.wire import agent_env, host
from services._agent import settings as agent_settings
from services._agent.settings import Components, HostPath, Seconds, env


def _required() -> Components:
    # What R-DEP makes the DRA driver wait for: what a device-plugin node waits for (R-READY).
    return Components(components.required_signals(components.Component.DRA_DRIVER))


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    kubelet_dir: pathlib.Path | None = attrs.field(default=None, metadata=env("METAX_KUBELET_DIR"))
    """The kubelet's root directory as this process sees it (plugins_registry/ and plugins/<driver>/ are under
    it); default ``<host root>/var/lib/kubelet``. The kubelet dials the socket path the driver gives, so the
    two must see the directory at the same path (a hostPath mounted at the same path in the pod)."""
    cdi_dir: HostPath = attrs.field(default=HostPath(host.CDI_DIR), metadata=env(agent_env.CDI_DIR))
    sdk_dir: HostPath = attrs.field(default=HostPath(sdk.HOST_DIR), metadata=env(agent_env.MACA_DIR))
    """Where the maca agent installs the MXMACA versions, on the host (read under the host root)."""
    sdk_runtime_dir: str | None = attrs.field(default=None, metadata=env("METAX_MACA_RUNTIME_DIR"))
    """The same directory as the container runtime sees it, for the CDI mounts; default ``sdk_dir``."""
    healthy_interval: Seconds = attrs.field(default=Seconds(5.0), metadata=env(agent_env.HEALTHY_INTERVAL.name))
    """Seconds between health checks and inventory reads (chart gpuDevice.healthyInterval)."""
    pod_resources_socket: pathlib.Path | None = attrs.field(default=None, metadata=env(agent_env.POD_RESOURCES_SOCKET))
    """The kubelet's PodResources socket; default ``<host root>/var/lib/kubelet/pod-resources/kubelet.sock``.
    Tells which GPUs device-plugin pods still hold (not published until they are released)."""
    required_components: Components = attrs.field(factory=_required, metadata=env(readiness.REQUIRED_ENV))
    tick: Seconds = attrs.field(default=Seconds(0.5), metadata=env(agent_env.TICK))
    health_unknown_grace: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.HEALTH_UNKNOWN_GRACE))
    """Seconds the GPUs' verdicts stand while the health tool does not answer, before every GPU is HealthUnknown
    (degraded; `metax_core.health.verdict`)."""

    @property
    def health_rules(self) -> verdict.Rules:
        return verdict.Rules(unknown_grace=self.health_unknown_grace)

    def kubelet_path(self, *parts: str) -> pathlib.Path:
        base = self.kubelet_dir if self.kubelet_dir is not None else self.host_path("/var/lib/kubelet")
        return base.joinpath(*parts)

    @property
    def sdk_mount_source(self) -> str:
        return self.sdk_runtime_dir or str(self.sdk_dir)

    @property
    def registry_dir(self) -> pathlib.Path:
        return self.kubelet_path("plugins_registry")

    @property
    def plugin_dir(self) -> pathlib.Path:
        return self.kubelet_path("plugins", DRIVER)

    @property
    def dra_endpoint(self) -> pathlib.Path:
        """The DRA socket as the kubelet sees it: on the host's ``/var/lib/kubelet`` (the pod mounts it under
        the host root), or where `kubelet_dir` says when it is given (the two then see the same path)."""
        base = self.kubelet_dir if self.kubelet_dir is not None else pathlib.Path("/var/lib/kubelet")
        return base / "plugins" / DRIVER / "dra.sock"

    @property
    def checkpoint(self) -> pathlib.Path:
        return self.plugin_dir / "checkpoint.json"

    def pod_resources(self) -> pathlib.Path:
        if self.pod_resources_socket is not None:
            return self.pod_resources_socket
        return self.kubelet_path("pod-resources", "kubelet.sock")


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
