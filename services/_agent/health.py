"""The node's GPU health as an allocator agent keeps it: readings stepped through the core's verdict machine,
published on its Node (the report annotation) and told in Events (R-HEALTH, docs/health.md).

Why shared: gpu-device (device-plugin nodes) and the DRA driver (DRA nodes) judge the same GPUs by the same rules
(`metax_core.health.verdict`) and publish the same report (`metax_core.health.report`); only what they do with a
verdict differs (Unhealthy devices, device taints). Quiet: the report is written only when it changes, and an
Event only when a GPU's faults change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metax_core.errors import ClusterError, HardwareError
from metax_core.health import report, verdict
from metax_core.inventory import GpuHealth, PciAddress, PciFunction
from metax_core.node import devices
from metax_core.ports.cluster import Events, NodeMetadata
from metax_core.ports.hardware import GpuMonitor
from services._agent import publish

log = logging.getLogger(__name__)


class HealthWatch:
    """Reads the GPUs' health, keeps the verdicts, publishes them."""

    def __init__(
        self,
        component: str,
        node_name: str,
        *,
        monitor: GpuMonitor,
        nodes: NodeMetadata,
        events: Events | None,
        rules: verdict.Rules = verdict.RULES,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.component = component
        self.monitor = monitor
        self.rules = rules
        self.wall = wall
        self.publisher = publish.Publisher(node_name, component, nodes=nodes, events=events, board=None)
        self.board = verdict.Board()
        self.recheck = False
        """The last reading saw a fault not in force yet: read again after `Rules.recheck`."""
        self.readings = 0
        self.unknown_readings = 0
        self._written: str | None = None

    def read(self, functions: Sequence[PciFunction]) -> tuple[verdict.Change, ...]:
        """One reading of every function (None when the tool fails: unknown, not unhealthy); an Event for each
        GPU whose faults changed."""
        reading: Mapping[PciAddress, GpuHealth] | None
        failure = ""
        try:
            reading = self.monitor.health()
        except HardwareError as exc:
            reading, failure = None, str(exc)
            self.unknown_readings += 1
            log.warning("health reading failed (unknown, verdicts kept): %s", exc)
        self.readings += 1
        stepped = verdict.step(
            self.board, [f.address for f in functions], reading, self.wall(), self.rules, failure=failure
        )
        self.board, self.recheck = stepped.board, stepped.recheck
        for change in stepped.changes:
            news = report.news(change.address, change.before, change.after)
            (log.warning if news.warning else log.info)("%s", news.message)
            self.publisher.event(news.reason, news.message, warning=news.warning)
        return stepped.changes

    def verdicts(self, functions: Sequence[PciFunction]) -> dict[PciAddress, verdict.Verdict]:
        return verdict.verdicts(self.board, functions)

    def health(self, functions: Sequence[PciFunction]) -> dict[PciAddress, devices.Health]:
        """What the device plugin and the slices take: unhealthy while a GPU is not fine."""
        return {address: devices.Health.of(v) for address, v in self.verdicts(functions).items()}

    def seen_on_node(self, node: Mapping[str, Any] | None) -> None:
        """What the Node carries now (read for other reasons): the next publish writes only if it differs."""
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        self._written = annotations.get(report.ANNOTATION)

    def publish(self, functions: Sequence[PciFunction], holders: Mapping[PciAddress, Sequence[str]]) -> bool:
        """Write the report on the Node when it differs from what is there; False when the write failed."""
        value = report.encode(report.of(self.verdicts(functions), holders, self.component))
        if value == self._written:
            return True
        try:
            self.publisher.nodes.patch_node_metadata(self.publisher.node_name, annotations={report.ANNOTATION: value})
        except ClusterError as exc:
            log.warning("cannot publish the GPU health report on node %s: %s", self.publisher.node_name, exc)
            return False
        self._written = value
        self.publisher.patches += 1
        return True
