"""Publishing an agent's result: our keys on its own Node, Events on the Node, its readiness signal.

Why shared: every agent publishes the same three ways and must not write when nothing changed (a steady
cluster sees no writes). `Publisher` patches only the keys that differ (`metax_core.node.publish.changes`),
emits Events through the deduplicating Events port, and rewrites the readiness file only when the signal's
content changes. It counts its writes so tests and benchmarks can show the steady state makes none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from metax_core.errors import ClusterError, HardwareError
from metax_core.node import publish, readiness
from metax_core.ports.cluster import Events, EventType, NodeMetadata, ObjectRef

if TYPE_CHECKING:  # the exporter's import path stays without the DRA model (its RSS, docs/exporter.md)
    from metax_core.ports import node as node_ports

log = logging.getLogger(__name__)


class Publisher:
    def __init__(
        self,
        node_name: str,
        component: str,
        *,
        nodes: NodeMetadata,
        events: Events | None,
        board: node_ports.ReadinessBoard | None,
    ) -> None:
        self.node_name = node_name
        self.component = component
        self.nodes = nodes
        self.events = events
        self.board = board
        self.patches = 0
        self.events_sent = 0
        self.signal_writes = 0
        self._signal: readiness.ComponentReadiness | None = None
        self._sequence = 0

    def node(self) -> Mapping[str, Any] | None:
        """The agent's own Node (None when it does not exist); ClusterError when unreadable."""
        return self.nodes.get_node(self.node_name)

    def node_or_none(self, say: Callable[[str, str, int], bool]) -> Mapping[str, Any] | None:
        """The agent's own Node, or None when it does not exist or cannot be read (said once, on ``say``)."""
        try:
            return self.node()
        except ClusterError as exc:
            say("node", f"cannot read node {self.node_name}: {exc}", logging.WARNING)
            return None

    def metadata(
        self,
        node: Mapping[str, Any] | None,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> dict[str, str | None]:
        """Patch what differs from ``node``; returns the keys written (empty: no write)."""
        have_labels, have_annotations = publish.node_metadata(node)
        label_patch = publish.changes(have_labels, labels or {})
        annotation_patch = publish.changes(have_annotations, annotations or {})
        if not label_patch and not annotation_patch:
            return {}
        self.nodes.patch_node_metadata(self.node_name, labels=label_patch or None, annotations=annotation_patch or None)
        self.patches += 1
        log.info("node %s: set %s", self.node_name, {**label_patch, **annotation_patch})
        return {**label_patch, **annotation_patch}

    def event(self, reason: str, message: str, *, warning: bool = False, uid: str | None = None) -> None:
        """An Event on the Node; a failure to send one is logged, never raised (Events are best effort)."""
        if self.events is None:
            return
        try:
            self.events.emit(
                ObjectRef("v1", "Node", self.node_name, uid=uid),
                reason=reason,
                message=message,
                type=EventType.WARNING if warning else EventType.NORMAL,
                action=self.component,
            )
            self.events_sent += 1
        except ClusterError as exc:
            log.warning("cannot send Event %s on node %s: %s", reason, self.node_name, exc)

    def signal(self, ready: bool, reason: str, *, version: str | None = None) -> None:
        """Publish the readiness signal (R-READY) when it differs from the last one published."""
        if self.board is None:
            return
        wanted = readiness.ComponentReadiness(self.component, ready, reason, version=version)
        if self._signal is not None and wanted == attrs.evolve(self._signal, sequence=None):
            return
        # A fresh sequence for each write (nanoseconds: it also grows across a restart of the agent).
        self._sequence = max(self._sequence + 1, time.time_ns())
        wanted = attrs.evolve(wanted, sequence=self._sequence)
        try:
            self.board.publish(wanted)
        except HardwareError as exc:
            log.error("cannot publish readiness of %s: %s", self.component, exc)
            return
        self._signal = wanted
        self.signal_writes += 1
        log.info("%s readiness: %s (%s)", self.component, "ready" if ready else "not ready", reason)

    def withdraw(self) -> None:
        if self.board is None:
            return
        try:
            self.board.withdraw(self.component)
        except HardwareError as exc:
            log.error("cannot withdraw readiness of %s: %s", self.component, exc)
        self._signal = None
