"""driver-manager's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from metax_core.node import driver_config
from metax_core.spec import model as spec
from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services._agent.settings import Seconds, env


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    deploy_policy: spec.DeployPolicy = attrs.field(
        default=spec.DeployPolicy.PREFER_CLOUD, metadata=env(agent_env.DEPLOY_POLICY.name)
    )
    payload_version: str | None = attrs.field(default=None, metadata=env(agent_env.DRIVER_VERSION.name))
    """driver.payload.version: the driver the payload image carries (required unless Never)."""
    payload_dir: str = attrs.field(default="/payload", metadata=env(agent_env.PAYLOAD_DIR))
    """Where the payload image keeps ``driver/*.ko`` and ``firmware/{virt,non-virt}/*.bin`` (container path)."""
    fw_upgrade_policy: spec.FirmwarePolicy = attrs.field(
        default=spec.FirmwarePolicy.NEVER, metadata=env(agent_env.FW_UPGRADE_POLICY.name)
    )
    fw_enable_virt: bool = attrs.field(default=False, metadata=env(agent_env.FW_ENABLE_VIRT.name))
    driver_config: str = attrs.field(default=driver_config.CONFIGMAP_NAME, metadata=env(agent_env.DRIVER_CONFIG.name))
    interval: Seconds = attrs.field(default=Seconds(30.0), metadata=env(agent_env.DRIVER_INTERVAL))
    """Seconds between full rounds when nothing changed (the ConfigMap watch makes a round due at once)."""
    physical_machine: bool = attrs.field(default=True, metadata=env("METAX_PHYSICAL_MACHINE"))
    """Firmware is flashed on physical machines only (§3.2.9); set false on a VM node."""
    host_module_tools: bool = attrs.field(default=True, metadata=env("METAX_HOST_MODULE_TOOLS"))
    """Run the host's modprobe/insmod in its mount namespace (hostPID); false: the tools on PATH."""


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
