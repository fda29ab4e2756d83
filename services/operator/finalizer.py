"""``cluster-operator``'s finalizer: put on it while it lives, and when it is deleted: wait, clean up, let it go.

Why a module of its own: the uninstall (R-INSTALL; ``helm uninstall --wait`` relies on it) is the one part of
the reconcile that runs on a deleted object, in an order that must not change: the nodes' agents are asked to
undo and answer (`uninstall_wait`, bounded), then every object and node key the operator wrote is removed
(`cleanup`), the uninstall's Events are recorded, and only then is the finalizer removed, so an interrupted
uninstall is simply done again by the next reconcile. The finalizer list is changed with a merge patch carrying
the resourceVersion it was decided on (`Objects.set_finalizers`): a finalizer someone else adds at the same
moment is never lost.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence

from metax_core.errors import Conflict, MetaxError, NotFound
from metax_core.ports.cluster import Events, NodeMetadata, Objects, RawObject
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from services.operator import applier, cleanup, cr_status, gpu_health, uninstall_wait
from services.operator.caches import Caches
from services.operator.settings import Settings

log = logging.getLogger(__name__)

EVENTS_BEFORE_GONE = 10.0
"""How long the finalizer waits for the uninstall's Events to be recorded before it lets the object go."""


class Finalizer:
    def __init__(
        self,
        settings: Settings,
        *,
        objects: Objects,
        nodes: NodeMetadata,
        events: Events,
        caches: Caches,
        apply: applier.Applier,
        health: gpu_health.GpuHealth,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.settings = settings
        self.objects = objects
        self.nodes = nodes
        self.events = events
        self.caches = caches
        self.applier = apply
        self.gpu_health = health
        self.clock = clock

    def ensure(self, cr: RawObject) -> None:
        """Our finalizer on ``cr`` (a metadata write, never ``spec``: the operator owns no spec field, issue 16)."""
        finalizers = list((cr.get("metadata") or {}).get("finalizers") or [])
        if cleanup.FINALIZER not in finalizers:
            self._set(cr, [*finalizers, cleanup.FINALIZER])

    def _set(self, cr: RawObject, finalizers: Sequence[str]) -> None:
        try:
            self.objects.set_finalizers(
                cr_status.CR_API,
                spec.KIND,
                spec.OBJECT_NAME,
                finalizers,
                resource_version=str(cr["metadata"]["resourceVersion"]),
                field_manager=self.settings.field_manager,
            )
        except (Conflict, NotFound) as exc:
            raise MetaxError(f"cluster-operator changed while setting finalizers ({exc}); reconciling again") from exc

    def finalize(self, cr: RawObject) -> float | None:
        """The uninstall of a deleted ``cr``; when to look again while the agents are still undoing (None: done)."""
        finalizers = list(cr["metadata"].get("finalizers") or [])
        if cleanup.FINALIZER not in finalizers:
            return None
        ref = cr_status.cr_ref(cr)
        if not uninstall_wait.over(cr):
            wait = uninstall_wait.await_agents(
                cr,
                node_list=self.caches.nodes.items(),
                pods=self.caches.pods.items(),
                nodes=self.nodes,
                objects=self.objects,
                events=self.events,
                ref=ref,
                timeout=self.settings.uninstall_timeout,
                now=self.clock(),
                field_manager=self.settings.field_manager,
            )
            if not wait.decision.proceed:
                return wait.again_in
            cr = self.objects.get(cr_status.CR_API, spec.KIND, spec.OBJECT_NAME) or cr  # its status was just written
        log.info("cluster-operator is being deleted: removing everything the operator created")
        cleanup.remove_everything(
            self.objects, self.nodes, self.applier, self.settings.namespace, self.caches.nodes.items()
        )
        self.gpu_health.clear(self.caches.health_nodes())
        self.events.emit(
            cr_status.cr_ref(cr),
            reason=event_reasons.CLEANED_UP,
            message="every object and node key the operator wrote is removed",
            action="Delete",
        )
        # Recorded before the object goes: whoever sees cluster-operator gone finds the uninstall's last word.
        if not self.events.flush(EVENTS_BEFORE_GONE):
            log.warning(
                "the uninstall's Events are not all recorded after %.0fs; removing the finalizer anyway",
                EVENTS_BEFORE_GONE,
            )
        self._set(cr, [f for f in finalizers if f != cleanup.FINALIZER])
        self.applier.forget()
        return None
