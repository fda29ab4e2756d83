"""Every write the operator makes, counted where it crosses the cluster port.

Why a module of its own: "no write when nothing changed" (issue 11, P2: a steady state costs the API server no
write) is a promise about every write, so it is counted in one place, around the ports the reconciler is given,
not by each caller after each call (one forgotten ``writes += 1`` and a test of the promise passes while the
operator writes). `CountingObjects` and `CountingNodes` pass every call through and record each write that
happened by verb and kind in a shared `Tally`: an apply (not a dry run), a status apply, a delete that found
its object, a finalizer patch, an eviction, a node metadata patch. Reads are not counted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from metax_core.ports.cluster import Fields, NodeMetadata, ObjectList, Objects, RawObject, Transform, WatchEvent

APPLY = "apply"
STATUS = "status"
DELETE = "delete"
FINALIZERS = "finalizers"
EVICT = "evict"
NODE_METADATA = "node-metadata"


class Tally:
    """Writes made so far, by (verb, kind); read by tests and benchmarks, never by the reconcile itself."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, verb: str, kind: str) -> None:
        with self._lock:
            self._counts[(verb, kind)] += 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def count(self, verb: str, kind: str | None = None) -> int:
        """Writes of ``verb`` (of ``kind`` only, when given)."""
        with self._lock:
            return sum(n for (v, k), n in self._counts.items() if v == verb and kind in (None, k))


class CountingObjects:
    """The `Objects` port, every write counted in ``tally``."""

    def __init__(self, inner: Objects, tally: Tally | None = None) -> None:
        self.inner = inner
        self.tally = tally if tally is not None else Tally()

    def apply(self, obj: RawObject, *, field_manager: str, force: bool = False, dry_run: bool = False) -> RawObject:
        result = self.inner.apply(obj, field_manager=field_manager, force=force, dry_run=dry_run)
        if not dry_run:
            self.tally.add(APPLY, str(obj.get("kind")))
        return result

    def apply_status(self, obj: RawObject, *, field_manager: str, force: bool = False) -> RawObject:
        result = self.inner.apply_status(obj, field_manager=field_manager, force=force)
        self.tally.add(STATUS, str(obj.get("kind")))
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        deleted = self.inner.delete(api_version, kind, name, namespace)
        if deleted:
            self.tally.add(DELETE, kind)
        return deleted

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
        result = self.inner.set_finalizers(
            api_version,
            kind,
            name,
            finalizers,
            resource_version=resource_version,
            field_manager=field_manager,
            namespace=namespace,
        )
        self.tally.add(FINALIZERS, kind)
        return result

    def evict(self, name: str, namespace: str) -> None:
        self.inner.evict(name, namespace)
        self.tally.add(EVICT, "Pod")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> RawObject | None:
        return self.inner.get(api_version, kind, name, namespace)

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
        return self.inner.list(api_version, kind, namespace, label_selector, field_selector, transform, fields)

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
        return self.inner.watch(
            api_version,
            kind,
            namespace,
            label_selector,
            field_selector,
            resource_version,
            timeout_seconds,
            fields,
            relist,
        )


class CountingNodes:
    """The `NodeMetadata` port, every patch counted in ``tally``."""

    def __init__(self, inner: NodeMetadata, tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    def get_node(self, name: str) -> RawObject | None:
        return self.inner.get_node(name)

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        self.inner.patch_node_metadata(name, labels=labels, annotations=annotations)
        self.tally.add(NODE_METADATA, "Node")


def counted(objects: Objects) -> CountingObjects:
    """``objects`` counted: itself when it counts already (the reconciler hands its parts the one it counts)."""
    return objects if isinstance(objects, CountingObjects) else CountingObjects(objects)
