"""Which components the operator deploys, in which order, and what each waits for (R-DEP, §3.2.3, R-READY).

The operator deploys a component only when it is enabled and every prerequisite is deployable; everything
else is reported with the exact reason (which prerequisite is disabled, or itself blocked), never left as a
silent half-install. Deploy order is a topological order that keeps the catalogue order among equals, so
it is the same on every run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from metax_core.components.catalogue import BY_COMPONENT, CATALOGUE
from metax_core.components.declaration import Component

if TYPE_CHECKING:  # annotations only: the agents' settings import this package (the exporter's memory)
    from metax_core.spec import model as spec

C = Component


def component_spec(s: spec.ClusterOperatorSpec, component: Component) -> spec.ComponentSpec:
    """The spec section of ``component``."""
    return BY_COMPONENT[component].section(s)


def enabled(s: spec.ClusterOperatorSpec) -> frozenset[Component]:
    return frozenset(c for c in Component if component_spec(s, c).deploy)


def deploy_order(components: Iterable[Component]) -> list[Component]:
    """``components`` with every prerequisite before its dependents; catalogue order breaks ties."""
    wanted = set(components)
    order: list[Component] = []
    placed: set[Component] = set()
    while len(placed) < len(wanted):
        progressed = False
        for info in CATALOGUE:
            c = info.component
            if c in wanted and c not in placed and all(p in placed or p not in wanted for p in info.prerequisites):
                order.append(c)
                placed.add(c)
                progressed = True
        if not progressed:  # pragma: no cover - the catalogue is acyclic, a test proves it
            raise AssertionError("dependency cycle in the component catalogue")
    return order


@attrs.frozen
class Blocked:
    """An enabled component that will not be deployed, and why."""

    component: Component
    disabled: tuple[Component, ...]
    """Prerequisites that are switched off."""
    blocked: tuple[Component, ...]
    """Prerequisites that are on but blocked themselves."""

    @property
    def reason(self) -> str:
        parts = []
        if self.disabled:
            parts.append("disabled prerequisite " + ", ".join(f"{c.value}" for c in self.disabled))
        if self.blocked:
            parts.append("blocked prerequisite " + ", ".join(f"{c.value}" for c in self.blocked))
        return f"{self.component.value} is enabled but not deployed: " + "; ".join(parts)


@attrs.frozen
class DeployPlan:
    deploy: tuple[Component, ...]
    """In deploy order."""
    blocked: tuple[Blocked, ...]
    disabled: tuple[Component, ...]


def plan(enabled_components: Iterable[Component]) -> DeployPlan:
    """Which enabled components can be deployed (all prerequisites deployable) and which cannot, and why."""
    on = set(enabled_components)
    deployable: set[Component] = set()
    blocked: list[Blocked] = []
    for c in deploy_order(Component):
        if c not in on:
            continue
        prereqs = BY_COMPONENT[c].prerequisites
        disabled = tuple(p for p in prereqs if p not in on)
        stuck = tuple(p for p in prereqs if p in on and p not in deployable)
        if disabled or stuck:
            blocked.append(Blocked(c, disabled, stuck))
        else:
            deployable.add(c)
    return DeployPlan(
        deploy=tuple(deploy_order(deployable)),
        blocked=tuple(blocked),
        disabled=tuple(c for c in Component if c not in on),
    )


def requirements(component: Component, deployed: Iterable[Component]) -> tuple[Component, ...]:
    """Components that must report ready on a node before ``component`` may serve there (R-READY).

    All prerequisites, transitively; for gpu-device and the DRA driver also the driver when it is deployed,
    because GPUs without a working kernel driver must not be advertised (as devices or in ResourceSlices).
    """
    present = set(deployed)
    needed: set[Component] = set()
    stack = list(BY_COMPONENT[component].prerequisites)
    if component in (C.GPU_DEVICE, C.DRA_DRIVER) and C.DRIVER in present:
        stack.append(C.DRIVER)
    while stack:
        c = stack.pop()
        if c not in needed:
            needed.add(c)
            stack.extend(BY_COMPONENT[c].prerequisites)
    return tuple(c for c in deploy_order(needed) if c in present)


def required_signals(component: Component) -> tuple[str, ...]:
    """The readiness signals ``component``'s agent waits for when every component is deployed (its default;
    the operator renders the deployed subset, `requirements`)."""
    return tuple(BY_COMPONENT[c].signal for c in requirements(component, list(Component)))


def signal(component: Component) -> str:
    """The name ``component``'s node agent publishes its readiness under, and readers look up (R-READY)."""
    return BY_COMPONENT[component].signal
