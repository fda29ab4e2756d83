"""The composition root of driver-manager: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from services._agent import builder, watch
from services.driver_manager import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host, tools

    mode = tools.ExecMode.HOST if settings.host_module_tools else tools.ExecMode.DIRECT
    return agent.Hardware.of(host.open_host(settings.host_root, module_tools=mode))


def watches(s: config.Settings) -> tuple[watch.Target, ...]:
    """Its Node and driver-config."""
    return builder.own_node(s), builder.config_map(s.driver_config, s.namespace)


RECIPE = builder.Recipe(
    component="driver-manager",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.DriverManager,
    watches=watches,
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
