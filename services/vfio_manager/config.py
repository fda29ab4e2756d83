"""vfio-manager's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from metax_core.node import vfio_config_map
from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services._agent.settings import Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    vfio_config: str = attrs.field(default=vfio_config_map.NAME, metadata=env(agent_env.VFIO_CONFIG.name))
    interval: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.VFIO_INTERVAL))
    """Seconds between full rounds when nothing changed (the ConfigMap watch makes a round due at once)."""


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
