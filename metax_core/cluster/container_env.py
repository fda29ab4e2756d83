"""A node agent's container environment, rendered from its component's declaration (R-READY, the agents' settings).

Why a module of its own: the variable names are the wire's (`metax_core.wire.agent_env`, read by each agent's
settings class); which spec-fed ones a component gets is its declaration's (`ComponentInfo.env`); this is the one
place that puts the two together into a container's ``env``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from metax_core import components
from metax_core.components import Component
from metax_core.wire import agent_env

if TYPE_CHECKING:
    from metax_core.spec import model as spec


def _downward(field_path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def render(
    s: spec.ClusterOperatorSpec,
    component: Component,
    *,
    log_level: str,
    host_root: str,
    required: str,
    probe_file: str | None,
) -> list[dict[str, Any]]:
    """The container's ``env`` for ``component``: the common variables, then what the spec feeds it."""
    env: list[dict[str, Any]] = [
        {"name": agent_env.NODE_NAME, **_downward(agent_env.DOWNWARD[agent_env.NODE_NAME])},
        {"name": agent_env.LOG_LEVEL, "value": log_level},
        {"name": agent_env.HOST_ROOT, "value": host_root},
    ]
    if required:
        env.append({"name": agent_env.REQUIRED_COMPONENTS, "value": required})
    fed = components.BY_COMPONENT[component].env
    if fed:
        env.append({"name": agent_env.NAMESPACE, **_downward(agent_env.DOWNWARD[agent_env.NAMESPACE])})
        env += [{"name": v.name, "value": value} for v in fed if (value := v.value(s)) is not None]
    if probe_file is not None:
        env.append({"name": agent_env.PROBE_FILE, "value": probe_file})
    return env
