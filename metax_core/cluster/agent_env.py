"""The environment contract between the operator and each node agent: which variable carries which setting.

Why one module: the operator renders these variables into every agent's pod (`workloads`) and each agent's
settings class reads them (``services/*/config.py``, ``env(agent_env.X.name)``); the names cross a process
boundary, so they are spelled here once. Each component declares the spec-fed variables it reads in
`SPEC_FED` — the operator's render is that table, not an if-chain per component — and
``tests/services/agents/test_render_env_roundtrip.py`` checks, for every agent, that what is rendered is what
its settings class reads and means the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from metax_core.cluster.components import Component
from metax_core.node import readiness

if TYPE_CHECKING:
    from metax_core.spec import model as spec


@attrs.frozen
class Var:
    """One variable: its name, and its value for a spec (None: not rendered, the agent's default holds)."""

    name: str
    value: Callable[[spec.ClusterOperatorSpec], str | None] = attrs.field(default=lambda s: None, eq=False)


def _downward(field_path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": field_path}}}


# What every agent reads (services._agent.settings.NodeAgentSettings).
NODE_NAME = "NODE_NAME"
"""The node the agent runs on (downward API ``spec.nodeName``)."""
NAMESPACE = "METAX_NAMESPACE"
"""Where the operator's ConfigMaps live (downward API ``metadata.namespace``)."""
HOST_ROOT = "METAX_HOST_ROOT"
LOG_LEVEL = "METAX_LOG_LEVEL"
PROBE_FILE = "METAX_PROBE_FILE"
REQUIRED_COMPONENTS = readiness.REQUIRED_ENV

DOWNWARD: Mapping[str, str] = {NODE_NAME: "spec.nodeName", NAMESPACE: "metadata.namespace"}
"""The variables filled by the kubelet from the pod itself."""

# Component settings fed by the spec.
HEALTHY_INTERVAL = Var("METAX_HEALTHY_INTERVAL", lambda s: str(s.gpu_device.healthy_interval))
SGPU_SHARES = Var("METAX_SGPU_SHARES", lambda s: str(s.gpu_device.sgpu_shares))
DEPLOY_POLICY = Var("METAX_DEPLOY_POLICY", lambda s: s.driver.deploy_policy.value)
FW_UPGRADE_POLICY = Var("METAX_FW_UPGRADE_POLICY", lambda s: s.driver.fw_upgrade_policy.value)
FW_ENABLE_VIRT = Var("METAX_FW_ENABLE_VIRT", lambda s: str(s.driver.fw_enable_virt).lower())
DRIVER_VERSION = Var("METAX_DRIVER_VERSION", lambda s: s.driver.payload.version or None)


# Every agent's settings import this module for the names; the ConfigMap formats (YAML, RE2) load only when
# rendering (the data-exporter's memory, docs/exporter.md).
def _driver_config_name(s: spec.ClusterOperatorSpec) -> str:
    from metax_core.node import driver_config

    return driver_config.CONFIGMAP_NAME


def _vfio_config_name(s: spec.ClusterOperatorSpec) -> str:
    from metax_core.node import vfio_config_map

    return vfio_config_map.NAME


DRIVER_CONFIG = Var("METAX_DRIVER_CONFIG", _driver_config_name)
VFIO_CONFIG = Var("METAX_VFIO_CONFIG", _vfio_config_name)
CONTAINER_STATE_ROOT = Var("METAX_CONTAINER_STATE_ROOT", lambda s: "/proc/1/root")
"""Where maca sees runc's state directories: the host's root through hostPID (its in-use check)."""
RUNTIME_RESTART_MODE = Var("METAX_RUNTIME_RESTART_MODE", lambda s: s.runtime.restart_mode.value)
"""How container-runtime restarts the node's runtime (`metax_core.spec.fieldtypes.RestartMode`)."""
RUNTIME_SOCKET = Var("METAX_RUNTIME_SOCKET", lambda s: s.runtime.socket)
"""The runtime's CRI socket on the host (None: the runtime's usual one)."""
SAMPLE_INTERVAL = Var("METAX_EXPORTER_SAMPLE_INTERVAL", lambda s: str(s.exporter.sample_interval))
EXPORTED_POD_LABELS = Var("METAX_EXPORTER_EXPORTED_POD_LABELS", lambda s: str(s.exporter.exported_pod_labels).lower())

SPEC_FED: Mapping[Component, tuple[Var, ...]] = {
    Component.GPU_LABEL: (SGPU_SHARES,),
    Component.RUNTIME: (RUNTIME_RESTART_MODE, RUNTIME_SOCKET),
    Component.DRIVER: (DEPLOY_POLICY, FW_UPGRADE_POLICY, FW_ENABLE_VIRT, DRIVER_CONFIG, DRIVER_VERSION),
    Component.VFIO_MANAGER: (VFIO_CONFIG,),
    Component.GPU_DEVICE: (HEALTHY_INTERVAL, SGPU_SHARES),
    # The same health checks as gpu-device: the devices it publishes are gpu-device's (a claim's sGPU sharing
    # comes with the claim's configuration, metax_core.dra.claims).
    Component.DRA_DRIVER: (HEALTHY_INTERVAL,),
    Component.MACA: (CONTAINER_STATE_ROOT,),
    Component.EXPORTER: (SAMPLE_INTERVAL, EXPORTED_POD_LABELS),
}
"""The node agents and the spec-fed variables each reads; an agent not listed here reads none (yet)."""


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
        {"name": NODE_NAME, **_downward(DOWNWARD[NODE_NAME])},
        {"name": LOG_LEVEL, "value": log_level},
        {"name": HOST_ROOT, "value": host_root},
    ]
    if required:
        env.append({"name": REQUIRED_COMPONENTS, "value": required})
    fed = SPEC_FED.get(component)
    if fed is not None:
        env.append({"name": NAMESPACE, **_downward(DOWNWARD[NAMESPACE])})
        env += [{"name": v.name, "value": value} for v in fed if (value := v.value(s)) is not None]
    if probe_file is not None:
        env.append({"name": PROBE_FILE, "value": probe_file})
    return env
