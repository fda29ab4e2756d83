"""The composition root of maca: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from metax_hw import sdk_store
from services._agent import builder
from services.maca import agent, config


def production_hardware(settings: config.Settings) -> sdk_store.HostSdkStore:
    return agent.production_store(settings)


RECIPE = builder.Recipe(
    component="maca",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.Maca,
    watches=lambda s: (builder.own_node(s),),
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
