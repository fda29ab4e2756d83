"""`Events` (metax_core.ports.cluster): events.k8s.io/v1 Events that do not flood the cluster.

Why deduplicate: a reconcile loop that fails every few seconds would otherwise create thousands of
identical Events. Like client-go's event broadcaster, a repeat of the same regarding object + reason +
message (+ type, action) within ``window`` (default 6 minutes after the last occurrence) bumps
``series.count`` and ``series.lastObservedTime`` of the existing Event instead of creating another.

How, without a process-local cache that a restart or a second replica would not share: the Event's name is
derived from what makes it "the same" (``<regarding name>.<hash>``), so every emitter finds it. The bump is
a merge patch with the Event's resourceVersion as precondition, retried on 409 after re-reading, so
concurrent emitters never lose a count. A repeat after the window replaces the old Event with a fresh one
(``note``, ``eventTime`` and friends are immutable in events.k8s.io/v1). Events about cluster-scoped objects
(Node, ClusterOperator) go to the ``default`` namespace, as kubectl expects.

`BackgroundEvents` records them off the caller's path, as client-go's broadcaster does: the operator's reconcile
hands an Event over and goes on applying the next object.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import re
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from metax_core.errors import MetaxError, NotFound
from metax_core.ports.cluster import Events, EventType, ObjectRef
from metax_k8s import retry
from metax_k8s.api import Api
from metax_k8s.objects import retrying

log = logging.getLogger(__name__)

API_VERSION = "events.k8s.io/v1"
CLUSTER_SCOPED_NAMESPACE = "default"
"""Where Events about cluster-scoped objects (Nodes, cluster-operator) go, as the kubelet puts its own."""
DEFAULT_WINDOW = dt.timedelta(minutes=6)
NOTE_LIMIT = 1024
"""events.k8s.io/v1 refuses a note longer than 1 kB."""


def micro_time(moment: dt.datetime) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _truncate(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "..."


def event_name(regarding: ObjectRef, reason: str, message: str, type: EventType, action: str) -> str:
    """The deterministic name of "this" event: the same inputs always give the same name."""
    identity = "\x00".join(
        [
            regarding.api_version,
            regarding.kind,
            regarding.namespace or "",
            regarding.name,
            reason,
            message,
            type.value,
            action,
        ]
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    prefix = re.sub(r"[^a-z0-9.-]", "-", regarding.name.lower())[:200].strip(".-") or "object"
    return f"{prefix}.{digest}"


class K8sEvents:
    """The `Events` port over any `Api`."""

    def __init__(
        self,
        api: Api,
        *,
        reporting_controller: str,
        reporting_instance: str,
        window: dt.timedelta = DEFAULT_WINDOW,
        clock: Callable[[], dt.datetime] = _utc_now,
        cluster_scoped_namespace: str = CLUSTER_SCOPED_NAMESPACE,
        policy: retry.RetryPolicy | None = None,
    ) -> None:
        self.api = retrying(api, policy)
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance[:128]
        self.window = window
        self.clock = clock
        self.cluster_scoped_namespace = cluster_scoped_namespace

    def emit(
        self,
        regarding: ObjectRef,
        *,
        reason: str,
        message: str,
        type: EventType = EventType.NORMAL,
        action: str = "Reconcile",
    ) -> None:
        name = event_name(regarding, reason, message, type, action)
        namespace = regarding.namespace or self.cluster_scoped_namespace

        def attempt() -> None:
            now = self.clock()
            try:
                existing = self.api.get(API_VERSION, "Event", name, namespace)
            except NotFound:
                existing = None
            if existing is not None and self._last_seen(existing) + self.window < now:
                log.debug("event %s/%s: last seen outside the window, starting a new one", namespace, name)
                with contextlib.suppress(NotFound):
                    self.api.delete(API_VERSION, "Event", name, namespace)
                existing = None
            if existing is None:
                body = self._new(name, namespace, regarding, reason, message, type, action, now)
                self.api.create(body, field_manager=self.reporting_controller)
                return
            series = existing.get("series") or {}
            count = int(series.get("count", 1)) + 1
            patch = {
                "metadata": {"resourceVersion": existing["metadata"]["resourceVersion"]},
                "series": {"count": count, "lastObservedTime": micro_time(now)},
            }
            self.api.merge_patch(
                API_VERSION, "Event", name, patch, namespace=namespace, field_manager=self.reporting_controller
            )

        self.api.policy.call(attempt, conflicts=True)

    def flush(self, timeout: float) -> bool:
        return True  # recorded in line: nothing waits

    @staticmethod
    def _last_seen(event: dict[str, Any]) -> dt.datetime:
        series = event.get("series") or {}
        stamp = series.get("lastObservedTime") or event.get("eventTime")
        return parse_time(stamp) if stamp else dt.datetime.min.replace(tzinfo=dt.UTC)

    def _new(
        self,
        name: str,
        namespace: str,
        regarding: ObjectRef,
        reason: str,
        message: str,
        type: EventType,
        action: str,
        now: dt.datetime,
    ) -> dict[str, Any]:
        ref: dict[str, str] = {"apiVersion": regarding.api_version, "kind": regarding.kind, "name": regarding.name}
        if regarding.namespace:
            ref["namespace"] = regarding.namespace
        if regarding.uid:
            ref["uid"] = regarding.uid
        return {
            "apiVersion": API_VERSION,
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": micro_time(now),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action[:128],
            "reason": reason[:128],
            "note": _truncate(message, NOTE_LIMIT),
            "type": type.value,
            "regarding": ref,
        }


@attrs.frozen
class _Pending:
    regarding: ObjectRef
    reason: str
    message: str
    type: EventType
    action: str


BACKGROUND_CAPACITY = 1000
"""Events waiting to be recorded before new ones are dropped (client-go's broadcaster queues 1,000 too)."""


class BackgroundEvents:
    """The `Events` port with the recording done by one thread of its own, in the order the Events came.

    Why: the operator's first reconcile applies some 60 objects and records an Event for each. Recorded in
    line, each Event cost a GET and a POST on the reconcile's path, two thirds of its requests, so on a busy
    control plane the DaemonSets came out over twice the time the objects alone take (issue 26, P1).

    An Event is telemetry, never state the operator reads back: one that cannot be recorded is logged, not
    retried by failing the reconcile; with `BACKGROUND_CAPACITY` waiting, a new one is dropped and counted in
    ``dropped`` rather than blocking a reconcile or growing without bound. `close` records what is waiting
    within its grace, so a clean stop loses nothing.
    """

    def __init__(self, inner: Events, *, capacity: int = BACKGROUND_CAPACITY) -> None:
        self.inner = inner
        self.capacity = capacity
        self.dropped = 0
        self._waiting: deque[_Pending] = deque()
        self._changed = threading.Condition()
        self._recording = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def emit(
        self,
        regarding: ObjectRef,
        *,
        reason: str,
        message: str,
        type: EventType = EventType.NORMAL,
        action: str = "Reconcile",
    ) -> None:
        with self._changed:
            if self._closed or len(self._waiting) >= self.capacity:
                self.dropped += 1
                why = "stopped" if self._closed else f"{len(self._waiting)} Events already waiting"
                log.warning("Event %s about %s %s not recorded: %s", reason, regarding.kind, regarding.name, why)
                return
            self._waiting.append(_Pending(regarding, reason, message, type, action))
            if self._thread is None:
                self._thread = threading.Thread(target=self._record, name="events", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _record(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._waiting) or self._closed)
                if not self._waiting:
                    return
                event = self._waiting.popleft()
                self._recording = True
            try:
                self.inner.emit(
                    event.regarding, reason=event.reason, message=event.message, type=event.type, action=event.action
                )
            except MetaxError as exc:
                log.warning(
                    "cannot record Event %s about %s %s: %s",
                    event.reason,
                    event.regarding.kind,
                    event.regarding.name,
                    exc,
                )
            except Exception:
                log.exception(
                    "recording Event %s about %s %s crashed", event.reason, event.regarding.kind, event.regarding.name
                )
            finally:
                with self._changed:
                    self._recording = False
                    self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting and not self._recording, timeout)

    def close(self, timeout: float) -> bool:
        """Record what is waiting within ``timeout``, then stop; later Events are dropped. False if some were."""
        drained = self.flush(timeout)
        with self._changed:
            self._closed = True
            left = len(self._waiting)
            self.dropped += left
            self._waiting.clear()
            self._changed.notify_all()
        if left:
            log.warning("stopping with %d Events not recorded after %.1fs", left, timeout)
        return drained
