"""topo-master's round: list the Nodes → `cluster_view.build` → apply ConfigMap ``metax-topology``'s data when
it changed, and an Event on each Node with a new problem (once per problem, not every round). The operator
creates that ConfigMap (and deletes it on uninstall); until it exists the apply is refused and retried.

Rounds run when a Node watch event arrives (at most one per ``min_interval``) and every ``resync``; the
ConfigMap is written only when its text changes, so a quiet cluster makes no write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from metax_core.errors import ClusterError
from metax_core.ports.cluster import Events, EventType, ObjectRef, Objects
from metax_core.topology import cluster_view
from metax_core.wire import event_reasons

log = logging.getLogger(__name__)
FIELD_MANAGER = "metax-topo-master"


class TopoMaster:
    def __init__(
        self,
        objects: Objects,
        events: Events | None,
        namespace: str,
        *,
        min_interval: float = 5.0,
        resync: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.objects = objects
        self.events = events
        self.namespace = namespace
        self.min_interval = min_interval
        self.resync = resync
        self.clock = clock
        self.writes = 0
        self._text: str | None = None
        self._reported: set[tuple[str, str, str]] = set()
        self._dirty = threading.Event()

    def round(self) -> cluster_view.View | None:
        """One rebuild; None when the Nodes cannot be listed (the last view stays)."""
        try:
            listing = self.objects.list("v1", "Node")
        except ClusterError as exc:
            log.warning("cannot list nodes, keeping the last topology view: %s", exc)
            return None
        nodes = {(n.get("metadata") or {}).get("name", ""): n for n in listing.items}
        view = cluster_view.build(
            nodes,
            unreadable=event_reasons.TOPOLOGY_UNREADABLE,
            inconsistent=event_reasons.TOPOLOGY_INCONSISTENT,
        )
        body = cluster_view.config_map(view, self.namespace)
        text = body["data"][cluster_view.KEY]
        if text != self._text:
            try:
                self.objects.apply(body, field_manager=FIELD_MANAGER, force=True)
            except ClusterError as exc:
                log.warning("cannot write ConfigMap %s: %s", cluster_view.NAME, exc)
                return view
            self._text = text
            self.writes += 1
            log.info("topology view: %d node(s), %d problem(s)", len(view.nodes), len(view.problems))
        self._report(view)
        return view

    def _report(self, view: cluster_view.View) -> None:
        current = {(p.node, p.reason, p.message) for p in view.problems}
        for node, reason, message in sorted(current - self._reported):
            log.warning("node %s: %s", node, message)
            if self.events is not None:
                try:
                    self.events.emit(
                        ObjectRef("v1", "Node", node),
                        reason=reason,
                        message=message,
                        type=EventType.WARNING,
                        action="topo-master",
                    )
                except ClusterError as exc:
                    log.warning("cannot send Event %s on node %s: %s", reason, node, exc)
        self._reported = current

    def watch(self, stop: threading.Event) -> None:
        """Mark the view dirty on every Node change (a thread: `run` starts it)."""
        while not stop.is_set():
            try:
                for _ in self.objects.watch("v1", "Node", timeout_seconds=int(self.resync)):
                    self._dirty.set()
                    if stop.is_set():
                        return
            except ClusterError as exc:
                log.warning("watching nodes failed: %s", exc)
                stop.wait(2.0)

    def run(self, stop: threading.Event) -> None:
        threading.Thread(target=self.watch, args=(stop,), name="topo-master-watch", daemon=True).start()
        last = float("-inf")
        while not stop.is_set():
            due = self._dirty.is_set() or self.clock() - last >= self.resync
            if due and self.clock() - last >= self.min_interval:
                self._dirty.clear()
                last = self.clock()
                self.round()
            stop.wait(0.5)
