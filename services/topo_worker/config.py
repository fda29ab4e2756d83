"""topo-worker's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services._agent.settings import Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    interval: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.TOPO_INTERVAL))
    """Seconds between topology reads (hot-plug, a GPU turning unhealthy)."""


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
