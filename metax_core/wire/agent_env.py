"""The environment contract between the operator and each node agent: which variable carries which setting.

Why here: the operator renders these variables into every agent's pod (`metax_core.cluster.container_env`) and
each agent's settings class reads them (``services/*/config.py``, ``env(agent_env.X.name)``); the names cross a
process boundary, so they are spelled here once. Which spec-fed variables a component reads is part of its
declaration (`metax_core.components.ComponentInfo.env`), and
``tests/services/agents/test_render_env_roundtrip.py`` checks, for every agent, that what is rendered is what its
settings class reads and means the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from metax_core.wire import meta, workload_env

if TYPE_CHECKING:
    from metax_core.spec import model as spec


@attrs.frozen
class Var:
    """One variable: its name, and its value for a spec (None: not rendered, the agent's default holds)."""

    name: str
    value: Callable[[spec.ClusterOperatorSpec], str | None] = attrs.field(default=lambda s: None, eq=False)


# What every agent reads (services._agent.settings.NodeAgentSettings).
NODE_NAME = "NODE_NAME"
"""The node the agent runs on (downward API ``spec.nodeName``)."""
NAMESPACE = "METAX_NAMESPACE"
"""Where the operator's ConfigMaps live (downward API ``metadata.namespace``)."""
HOST_ROOT = "METAX_HOST_ROOT"
LOG_LEVEL = "METAX_LOG_LEVEL"
PROBE_FILE = "METAX_PROBE_FILE"
REQUIRED_COMPONENTS = "METAX_REQUIRED_COMPONENTS"
"""The readiness signals the agent waits for on its node (`metax_core.node.readiness`), comma-separated."""

PAYLOAD_DIR = "METAX_PAYLOAD_DIR"
"""Where the pod's payload init containers left the payload (the driver's, or maca's ``<n>/`` per image)."""
PAYLOAD_IMAGES = "METAX_PAYLOAD_IMAGES"
"""maca's payload images, comma-separated, in the order of their ``<n>/`` directories."""

# -- agent settings the operator leaves at their defaults; the dev tooling's stand-ins and the tests set them --
RESYNC = "METAX_RESYNC"
"""Seconds between an agent's full re-reads when no watch event came."""
TICK = "METAX_TICK"
"""Seconds between an agent loop's wake-ups."""
LABEL_INTERVAL = "METAX_LABEL_INTERVAL"
READINESS_INTERVAL = "METAX_READINESS_INTERVAL"
INVENTORY_INTERVAL = "METAX_INVENTORY_INTERVAL"
DRIVER_INTERVAL = "METAX_DRIVER_INTERVAL"
MACA_INTERVAL = "METAX_MACA_INTERVAL"
VFIO_INTERVAL = "METAX_VFIO_INTERVAL"
TOPO_INTERVAL = "METAX_TOPO_INTERVAL"
HEALTH_UNKNOWN_GRACE = "METAX_HEALTH_UNKNOWN_GRACE"
"""Seconds the GPUs' health verdicts stand while the health tool does not answer (the three health readers)."""
CDI_DIR = "METAX_CDI_DIR"
"""The CDI spec directory as the process sees it (gpu-device and the DRA driver write, container-edit reads)."""
POD_RESOURCES_SOCKET = "METAX_POD_RESOURCES_SOCKET"
"""The kubelet's PodResources socket as the process sees it."""
MACA_DIR = "METAX_MACA_DIR"
"""Where maca installs the SDK versions (maca writes, container-edit and the DRA driver read)."""
MACA_IN_USE_DIR = "METAX_MACA_IN_USE_DIR"
"""maca's in-use records (container-edit writes, maca reads)."""
EDIT_SOCKET = "METAX_EDIT_SOCKET"
"""container-edit's socket (it listens, the runtime wrapper container-runtime installs calls it)."""

DOWNWARD: Mapping[str, str] = {NODE_NAME: "spec.nodeName", NAMESPACE: "metadata.namespace"}
"""The variables filled by the kubelet from the pod itself."""

# Component settings fed by the spec.
HEALTHY_INTERVAL = Var("METAX_HEALTHY_INTERVAL", lambda s: str(s.gpu_device.healthy_interval))
SGPU_SHARES = Var(workload_env.SGPU_SHARES_PER_GPU, lambda s: str(s.gpu_device.sgpu_shares))
DEPLOY_POLICY = Var("METAX_DEPLOY_POLICY", lambda s: s.driver.deploy_policy.value)
FW_UPGRADE_POLICY = Var("METAX_FW_UPGRADE_POLICY", lambda s: s.driver.fw_upgrade_policy.value)
FW_ENABLE_VIRT = Var("METAX_FW_ENABLE_VIRT", lambda s: str(s.driver.fw_enable_virt).lower())
DRIVER_VERSION = Var("METAX_DRIVER_VERSION", lambda s: s.driver.payload.version or None)
DRIVER_CONFIG = Var("METAX_DRIVER_CONFIG", lambda s: meta.DRIVER_CONFIG_MAP)
VFIO_CONFIG = Var("METAX_VFIO_CONFIG", lambda s: meta.VFIO_CONFIG_MAP)
CONTAINER_STATE_ROOT = Var("METAX_CONTAINER_STATE_ROOT", lambda s: "/proc/1/root")
"""Where maca sees runc's state directories: the host's root through hostPID (its in-use check)."""
RUNTIME_RESTART_MODE = Var("METAX_RUNTIME_RESTART_MODE", lambda s: s.runtime.restart_mode.value)
"""How container-runtime restarts the node's runtime (`metax_core.spec.fieldtypes.RestartMode`)."""
RUNTIME_SOCKET = Var("METAX_RUNTIME_SOCKET", lambda s: s.runtime.socket)
"""The runtime's CRI socket on the host (None: the runtime's usual one)."""
SAMPLE_INTERVAL = Var("METAX_EXPORTER_SAMPLE_INTERVAL", lambda s: str(s.exporter.sample_interval))
EXPORTED_POD_LABELS = Var("METAX_EXPORTER_EXPORTED_POD_LABELS", lambda s: str(s.exporter.exported_pod_labels).lower())
