"""Each component's state, in the gpu-operator shape: desired objects → apply → observed readiness.

Why small: the render and its apply order (`metax_core.cluster.workloads`) and the roll-up
(`metax_core.cluster.status`) are pure and live in the core; here the objects are applied through the
`applier.Applier`, each component's workloads read back from the informer cache, and a component that
cannot be applied reported without holding up the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metax_core.cluster import status, workloads
from metax_core.components import Component
from metax_core.errors import MetaxError
from metax_core.ports.cluster import RawObject
from services.operator import applier

log = logging.getLogger(__name__)

Lookup = Callable[[str, str, str | None], RawObject | None]
"""(kind, name, namespace) → the live object from the cache, or None."""


def sync_all(
    deploy: Sequence[Component], rendered: Sequence[Mapping[str, Any]], apply: applier.Applier, lookup: Lookup
) -> list[status.ComponentResult]:
    """Apply the objects of the components in ``deploy`` in `workloads.in_apply_order` (every component's accounts,
    roles, services and config, then the workloads), and observe each component's readiness from its workloads.

    A component whose object cannot be applied (not ours, or refused) reports that and gets none of its later
    objects applied, so its workloads never start without their accounts; the other components go on.
    """
    live: dict[Component, list[RawObject | None]] = {c: [] for c in deploy}
    by_label = {c.value: c for c in deploy}
    failed: dict[Component, status.ComponentResult] = {}
    for manifest in workloads.in_apply_order(rendered):
        metadata = manifest["metadata"]
        component = by_label.get((metadata.get("labels") or {}).get(workloads.COMPONENT_LABEL, ""))
        if component is None or component in failed:
            continue
        cached = lookup(str(manifest["kind"]), str(metadata["name"]), metadata.get("namespace"))
        try:
            result = apply.apply(manifest, cached)
        except applier.NotOurs as exc:  # the applier reported it (once per object and reason)
            failed[component] = status.failed(component, str(exc))
            continue
        except MetaxError as exc:
            log.warning("component %s: apply failed: %s", component.value, exc)
            failed[component] = status.failed(component, f"apply failed: {exc}")
            continue
        if manifest["kind"] in workloads.WORKLOAD_KINDS:
            live[component].append(result)
    return [failed.get(c) or status.observe(c, live[c], rolling_update=c is not Component.DRIVER) for c in deploy]
