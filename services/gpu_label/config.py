"""gpu-label's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from metax_core.node import devices
from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services._agent.settings import Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    interval: Seconds = attrs.field(default=Seconds(10.0), metadata=env(agent_env.LABEL_INTERVAL))
    """Seconds between inventory reads (hot-plug, VF count, health)."""
    sgpu_shares: int = attrs.field(default=devices.DEFAULT_SHARES, metadata=env(agent_env.SGPU_SHARES.name))
    """sGPUs per GPU in HAMi's annotation (totalDevCount)."""


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
