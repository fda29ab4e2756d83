"""maca's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import attrs

from metax_core.runtime import sdk
from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services._agent.settings import HostPath, Names, Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    interval: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.MACA_INTERVAL))
    """Seconds between rounds without a watch event (GC of versions whose last container ended)."""
    payload_dir: pathlib.Path = attrs.field(default=pathlib.Path("/payload"), metadata=env(agent_env.PAYLOAD_DIR))
    """Where the init containers copied the images' ``/payload`` (image n at ``<dir>/<n>``)."""
    payload_images: Names = attrs.field(default=Names(()), metadata=env(agent_env.PAYLOAD_IMAGES))
    """The ``maca.payload.images`` references, in the order of their payload directories."""
    sdk_dir: HostPath = attrs.field(default=HostPath(sdk.HOST_DIR), metadata=env(agent_env.MACA_DIR))
    in_use_dir: HostPath = attrs.field(default=HostPath(sdk.IN_USE_DIR), metadata=env(agent_env.MACA_IN_USE_DIR))
    container_state_root: pathlib.Path | None = attrs.field(
        default=None, metadata=env(agent_env.CONTAINER_STATE_ROOT.name)
    )
    """Where runc's state directories are seen (the host root through hostPID, ``/proc/1/root``); default the
    host root."""

    @property
    def state_root(self) -> pathlib.Path:
        return self.container_state_root or self.host_root


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
