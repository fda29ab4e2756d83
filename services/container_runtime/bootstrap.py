"""The composition root of container-runtime: its `Recipe` for the shared builder (services._agent.builder)."""

from __future__ import annotations

from services._agent import builder, watch
from services.container_runtime import agent, config


def production_hardware(settings: config.Settings) -> agent.Hardware:
    """The host's programs in the host's namespaces (hostPID) and its systemd."""
    from metax_hw import container_runtime

    program = container_runtime.HostProgram(host_namespaces=settings.host_namespaces)
    return agent.Hardware(program, container_runtime.SystemdService(program))


def watches(s: config.Settings) -> tuple[watch.Target, ...]:
    """Its Node (the uninstall request); the runtime's files are looked at every tick."""
    return (builder.own_node(s),)


RECIPE = builder.Recipe(
    component="container-runtime",
    settings=config.from_env,
    hardware=production_hardware,
    agent=agent.ContainerRuntime,
    watches=watches,
)
bootstrap = RECIPE.bootstrap
runner = RECIPE.runner
build = RECIPE.build
