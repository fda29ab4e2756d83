"""The composition root of vfio-manager: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from services._agent import builder, watch
from services.vfio_manager import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    """The real adapters; module tools run DIRECT (the image's kmod on the host's /lib/modules, no hostPID)."""
    from metax_hw import host

    return agent.Hardware.of(host.open_host(settings.host_root))


def watches(s: config.Settings) -> tuple[watch.Target, ...]:
    """Its Node and metax-vfio-config."""
    return builder.own_node(s), builder.config_map(s.vfio_config, s.namespace)


RECIPE = builder.Recipe(
    component="vfio-manager",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.VfioManager,
    watches=watches,
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
