"""R-VF: a node whose VF count in ``driver-config`` changed gets its gpu-device pod recreated, that pod only.

Why a module of its own: which pods to recreate is `metax_core.cluster.vf_restarts.decide`'s (``metax-operator
diff --driver-config`` predicts with it); this gathers what it decides from (``driver-config`` and the gpu-device
pods from the caches, the VF counts the status recorded when each pod was seen) and carries it out, with an Event
on the Node for each pod recreated.
"""

from __future__ import annotations

import logging

from metax_core.cluster import vf_restarts, workloads
from metax_core.components import Component
from metax_core.ports.cluster import Events, ObjectRef, Objects, RawObject
from metax_core.wire import event_reasons
from services.operator.caches import Caches

log = logging.getLogger(__name__)


def recreate(cr: RawObject, *, caches: Caches, objects: Objects, events: Events, namespace: str) -> dict[str, int]:
    """Recreate the gpu-device pod of each node whose VF count changed since its pod was seen; the VF counts to
    record in the status (``vfNums``)."""
    cm = caches.configmaps.get(workloads.DRIVER_CONFIG_MAP, namespace)
    recorded = {str(k): int(v) for k, v in ((cr.get("status") or {}).get("vfNums") or {}).items()}
    decision = vf_restarts.decide(
        vf_restarts.config_or_none((cm or {}).get("data")),
        recorded,
        vf_restarts.gpu_device_pods(caches.pods_of(Component.GPU_DEVICE)),
    )
    for change in decision.recreate:
        if objects.delete("v1", "Pod", change.pod, namespace):
            log.info(
                "node %s: VF count %d -> %d, gpu-device pod %s recreated",
                change.node,
                change.old,
                change.new,
                change.pod,
            )
            events.emit(
                ObjectRef("v1", "Node", change.node),
                reason=event_reasons.VF_COUNT_CHANGED,
                message=f"VF count {change.old} -> {change.new}: gpu-device pod {change.pod} recreated",
            )
    return dict(decision.seen)
