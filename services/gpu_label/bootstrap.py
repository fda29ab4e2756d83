"""The composition root of gpu-label: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from services._agent import builder
from services.gpu_label import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    from metax_hw import host

    return agent.Hardware.of(host.open_host(settings.host_root))


RECIPE = builder.Recipe(
    component="gpu-label",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.GpuLabel,
    watches=lambda s: (builder.own_node(s),),
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
