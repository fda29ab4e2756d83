"""One state per component, in the gpu-operator shape: desired objects → apply → observed readiness.

Why small: the render (`metax_core.cluster.workloads`) and the roll-up (`metax_core.cluster.status`) are pure
and live in the core; a state only applies its component's objects through the `applier.Applier` and reads
its workloads back from the informer cache. The reconciler runs the states in R-DEP order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.cluster import status
from metax_core.cluster.components import Component
from metax_core.cluster.workloads import COMPONENT_LABEL
from metax_core.errors import MetaxError
from metax_core.ports.cluster import RawObject
from services.operator import applier

log = logging.getLogger(__name__)

Lookup = Callable[[str, str, str | None], RawObject | None]
"""(kind, name, namespace) → the live object from the cache, or None."""


@attrs.frozen
class ComponentState:
    component: Component

    @property
    def name(self) -> str:
        return self.component.value

    def objects(self, rendered: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [o for o in rendered if o["metadata"]["labels"].get(COMPONENT_LABEL) == self.component.value]

    def sync(
        self, rendered: Sequence[Mapping[str, Any]], apply: applier.Applier, lookup: Lookup
    ) -> status.ComponentResult:
        mine = self.objects(rendered)
        live: list[RawObject | None] = []
        try:
            for manifest in mine:
                metadata = manifest["metadata"]
                cached = lookup(str(manifest["kind"]), str(metadata["name"]), metadata.get("namespace"))
                result = apply.apply(manifest, cached)
                if manifest["kind"] in ("DaemonSet", "Deployment"):
                    live.append(result)
        except applier.NotOurs as exc:  # the applier reported it (once per object and reason)
            return status.failed(self.component, str(exc))
        except MetaxError as exc:
            log.warning("component %s: apply failed: %s", self.name, exc)
            return status.failed(self.component, f"apply failed: {exc}")
        return status.observe(self.component, live, rolling_update=self.component is not Component.DRIVER)


STATES = tuple(ComponentState(c) for c in Component)
