"""container-edit's settings, from its container's environment (docs/maca.md)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import attrs

from metax_core.node import devices
from metax_core.runtime import handler, sdk
from metax_core.wire import agent_env, host
from services._agent import settings as agent_settings
from services._agent.settings import HostPath, env


@attrs.frozen(kw_only=True)
class Settings:
    host_root: pathlib.Path = attrs.field(default=pathlib.Path("/"), metadata=env(agent_env.HOST_ROOT))
    socket: HostPath = attrs.field(default=HostPath(handler.EDIT_SOCKET_HOST_PATH), metadata=env(agent_env.EDIT_SOCKET))
    """Where it listens (a host path: the wrapper runs on the host)."""
    sdk_dir: HostPath = attrs.field(default=HostPath(sdk.HOST_DIR), metadata=env(agent_env.MACA_DIR))
    in_use_dir: HostPath = attrs.field(default=HostPath(sdk.IN_USE_DIR), metadata=env(agent_env.MACA_IN_USE_DIR))
    cdi_dir: HostPath = attrs.field(default=HostPath(host.CDI_DIR), metadata=env(agent_env.CDI_DIR))
    node_qos: devices.QosPolicy | None = attrs.field(default=None, metadata=env("METAX_NODE_QOS_POLICY"))
    """The node's sGPU QoS policy for an sGPU container that carries none (gpu-device sets it at Allocate)."""
    log_level: str = attrs.field(default="INFO", metadata=env(agent_env.LOG_LEVEL))
    probe_file: str | None = attrs.field(default=None, metadata=env(agent_env.PROBE_FILE))
    """Present exactly while the service listens (its container's readinessProbe, like the agents')."""

    def host_path(self, path: str) -> pathlib.Path:
        return self.host_root / path.lstrip("/")


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
