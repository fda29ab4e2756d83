"""The cluster port: what the operator and node agents need from the Kubernetes API.

Objects cross this port as plain JSON-like mappings (what the API serves), so the in-memory adapter and the
real one (official `kubernetes` client) are interchangeable; typed models live in the core. Every failure is
raised as `metax_core.errors.ClusterError` (or `Conflict` / `NotFound`) after the adapter's own retries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypedDict

import attrs

RawObject = Mapping[str, Any]
Transform = Callable[[RawObject], RawObject | None]
"""Applied by `Objects.list` to each object as it arrives: what to keep of it (None: drop it)."""
Fields = type
"""The fields a reader keeps of each object, as a `typing.TypedDict` class (a nested TypedDict for a nested object,
``Any`` for a value kept whole). `Objects.list` and `Objects.watch` given one hand out only those fields: the real
adapter decodes nothing else from the API server's answer, which at thousands of pods is most of a cache's work
and of its garbage (issue 43 item 7). An object that does not fit (a value of another type than declared) arrives
whole: fields save work, they never lose an object. A shape extends `ObjectFields` (what every object says it is)
and keeps at least `ObjectMetaFields` under ``metadata`` (what a watch knows an object by and resumes from)."""


class ObjectFields(TypedDict, total=False):
    """The fields every `Fields` shape keeps at its top: what the object is."""

    apiVersion: str
    kind: str


class ObjectMetaFields(TypedDict, total=False):
    """The metadata every `Fields` shape keeps (its own metadata shape extends this one)."""

    name: str
    namespace: str
    resourceVersion: str


@attrs.frozen
class ObjectRef:
    """Names one API object: enough to get it, patch it, or point an Event at it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None


class WatchEventType(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@attrs.frozen
class WatchEvent:
    type: WatchEventType
    object: RawObject


@attrs.frozen
class ObjectList:
    items: Sequence[RawObject]
    resource_version: str


class Objects(Protocol):
    """Generic object access: server-side apply, get, list, watch, delete, status."""

    def apply(self, obj: RawObject, *, field_manager: str, force: bool = False, dry_run: bool = False) -> RawObject:
        """Server-side apply ``obj``; only the fields in ``obj`` are owned by ``field_manager``.

        A field owned by another manager with a different value raises `Conflict` unless ``force``.
        ``dry_run``: the server admits (defaults, validates) and returns the result without storing it.
        """
        ...

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> RawObject | None: ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        fields: Fields | None = None,
    ) -> ObjectList:
        """Every matching object; with ``transform``, what it returns for each (None drops the object); with
        ``fields``, only those fields of each (`Fields`), before ``transform``.

        The real adapter fetches pages (``limit``/``continue``) and transforms each page before the next
        arrives, so listing thousands of pods for a few fields costs one page of memory, not all of them.
        """
        ...

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        fields: Fields | None = None,
        relist: bool = True,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version``; relists transparently when it has expired (HTTP 410). With
        ``fields``, each event's object has only those fields (`Fields`).

        ``relist=False``: raise `metax_core.errors.Expired` instead, for a caller that keeps its own copy of every
        object and relists itself (the operator's informers): the watch then remembers nothing of what it
        delivered (to relist transparently it must remember every object's key and version, a second index of
        35,000 pods at 5,000 nodes)."""
        ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete; False when it did not exist."""
        ...

    def apply_status(self, obj: RawObject, *, field_manager: str, force: bool = False) -> RawObject:
        """Server-side apply to the status subresource (only ``status`` of ``obj`` counts)."""
        ...

    def set_finalizers(
        self,
        api_version: str,
        kind: str,
        name: str,
        finalizers: Sequence[str],
        *,
        resource_version: str,
        field_manager: str,
        namespace: str | None = None,
    ) -> RawObject:
        """Replace ``metadata.finalizers`` by ``finalizers`` if the object is still at ``resource_version``.

        A merge patch, not an apply: finalizers are a list every controller adds to and removes from, and an
        apply would take ownership of the whole list. The version is a precondition (`Conflict` when the object
        moved on meanwhile, `NotFound` when it is gone), so a finalizer added or removed by someone else at the
        same moment is never undone: the caller reads again and decides again.
        """
        ...

    def evict(self, name: str, namespace: str) -> None:
        """Evict a pod through the Eviction API (``pods/eviction``): deleted gracefully unless a
        PodDisruptionBudget allows no disruption now (a `ClusterError` with status 429, not retried); `NotFound`
        when the pod is gone."""
        ...


class NodeCordons(Protocol):
    """A driver rollout's cordons (``spec.unschedulable``, shared with administrators and ``kubectl drain``):
    the rollout gives back only what it cordoned itself (`metax_k8s.cordon`)."""

    def cordon(self, name: str, since: str) -> bool:
        """Cordon ``name`` for the rollout; True when the rollout holds it (now or before), False when it was
        cordoned by someone else (left as it is) or is gone."""
        ...

    def uncordon(self, name: str) -> bool:
        """Give ``name`` back if the rollout cordoned it; False when it did not (or the node is gone)."""
        ...


class NodeMetadata(Protocol):
    """Node labels and annotations owned by us: patches touch only the given keys (None removes a key)."""

    def get_node(self, name: str) -> RawObject | None: ...

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None: ...


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Events(Protocol):
    """events.k8s.io/v1 Events, deduplicated (a repeat bumps the series count instead of a new object)."""

    def emit(
        self,
        regarding: ObjectRef,
        *,
        reason: str,
        message: str,
        type: EventType = EventType.NORMAL,
        action: str = "Reconcile",
    ) -> None: ...

    def flush(self, timeout: float) -> bool:
        """Wait until every Event emitted so far is recorded (or has failed); False if ``timeout`` ran out first.
        A recorder that records in line has nothing waiting."""
        ...


class LeaderLock(Protocol):
    """A coordination.k8s.io/v1 Lease held by one identity at a time."""

    def try_acquire_or_renew(self) -> bool:
        """True when this identity holds the lease after the call."""
        ...

    def release(self) -> None: ...
