"""`Objects` (metax_core.ports.cluster) on top of an `Api`: server-side apply, reads, and watches that last.

Why this is more than a pass-through: a raw watch ends when the server closes it, breaks when the API server
restarts, and fails with 410 Gone once its resourceVersion has been compacted. Callers want a stream of
changes for ``timeout_seconds`` no matter what, so `K8sObjects.watch`:

- starts with a list when no resourceVersion is given (ADDED for every object, like an informer), then
  watches from the list's version, with bookmarks on, so a quiet watch still advances its version;
- reconnects from the last version it saw after a broken stream, a client-side read timeout, or a 429/5xx,
  backing off (policy of `retry.RetryPolicy`) until the deadline;
- on 410 relists and turns the difference against what it has delivered into ADDED / MODIFIED / DELETED
  events, then watches on from the list's version. Objects deleted while the watch was away are reported
  only if this watch had delivered them before (a caller's own resourceVersion tells it nothing else); such
  a DELETED event carries the object's identity (apiVersion, kind, name, namespace and the last
  resourceVersion delivered), not its last full state: a watch remembers only the resourceVersion of each
  object it delivered, so a watch over thousands of pods does not hold a second copy of each (issue 11, P3);
- yields BOOKMARK events (only ``metadata.resourceVersion`` is meaningful) so a caller can resume later.

Writes are server-side apply (``fieldManager``, ``force``), except a finalizer list (a merge patch with the
resourceVersion it was decided on as a precondition) and evictions; no read-modify-write of whole objects.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from metax_core.errors import NotFound
from metax_core.ports.cluster import Fields, ObjectList, RawObject, Transform, WatchEvent, WatchEventType
from metax_k8s import retry
from metax_k8s.api import Api

log = logging.getLogger(__name__)

_Key = tuple[str, str]


def _key(obj: RawObject) -> _Key:
    """(namespace, name); the namespace interned: a watch of thousands of pods keeps one copy of it (P3)."""
    metadata = obj.get("metadata") or {}
    return (sys.intern(str(metadata.get("namespace") or "")), str(metadata.get("name") or ""))


def resource_version(obj: RawObject) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version is not None else None


def retrying(api: Api, policy: retry.RetryPolicy | None) -> retry.RetryingApi:
    """``api`` wrapped once in the shared retry policy."""
    return api if isinstance(api, retry.RetryingApi) else retry.RetryingApi(api, policy)


class K8sObjects:
    """The `Objects` port over any `Api` (`client.HttpApi` or `inmemory.InMemoryApiServer`)."""

    def __init__(
        self,
        api: Api,
        *,
        policy: retry.RetryPolicy | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = retrying(api, policy)
        self._monotonic = monotonic

    def apply(self, obj: RawObject, *, field_manager: str, force: bool = False, dry_run: bool = False) -> RawObject:
        return self.api.apply(obj, field_manager=field_manager, force=force, dry_run=dry_run)

    def apply_status(self, obj: RawObject, *, field_manager: str, force: bool = False) -> RawObject:
        return self.api.apply(obj, field_manager=field_manager, force=force, subresource="status")

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
        patch = {"metadata": {"finalizers": list(finalizers), "resourceVersion": resource_version}}
        return self.api.merge_patch(api_version, kind, name, patch, namespace=namespace, field_manager=field_manager)

    def evict(self, name: str, namespace: str) -> None:
        self.api.evict(name, namespace)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> RawObject | None:
        try:
            return self.api.get(api_version, kind, name, namespace)
        except NotFound:
            return None

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
        return self.api.list(
            api_version,
            kind,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            transform=transform,
            fields=fields,
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            self.api.delete(api_version, kind, name, namespace)
        except NotFound:
            return False
        return True

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
        watch = _Watch(
            self, api_version, kind, namespace, label_selector, field_selector, timeout_seconds, fields, relist
        )
        return watch.run(resource_version)


class _Watch:
    """One logical watch: many watch requests, relists, and what has been delivered so far."""

    def __init__(
        self,
        objects: K8sObjects,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        timeout_seconds: int,
        fields: Fields | None = None,
        relists: bool = True,
    ) -> None:
        self.objects = objects
        self.fields = fields
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.deadline = objects._monotonic() + timeout_seconds
        self.known: dict[_Key, str | None] = {}
        """Every object delivered and not deleted since, by key: the resourceVersion delivered, nothing more (kept
        only when the watch `relists` itself)."""
        self.relists = relists
        """Whether an expired version is listed again here (`Objects.watch`'s ``relist``); else `retry.Gone` is
        raised to the caller, and `known` stays empty."""
        self.version: str | None = None

    def _remaining(self) -> float:
        return self.deadline - self.objects._monotonic()

    def _list(self) -> ObjectList:
        return self.objects.list(
            self.api_version, self.kind, self.namespace, self.label_selector, self.field_selector, fields=self.fields
        )

    def _relist(self, initial: bool) -> Iterator[WatchEvent]:
        listing = self._list()
        listed = {_key(item): item for item in listing.items}
        for key, item in listed.items():
            if key not in self.known:
                yield WatchEvent(WatchEventType.ADDED, item)
            elif self.known[key] != resource_version(item):
                yield WatchEvent(WatchEventType.MODIFIED, item)
        if not initial:
            for key, version in self.known.items():
                if key not in listed:
                    yield WatchEvent(WatchEventType.DELETED, self._identity(key, version))
        if self.relists:
            self.known = {key: resource_version(item) for key, item in listed.items()}
        self.version = listing.resource_version

    def _identity(self, key: _Key, version: str | None) -> RawObject:
        """The object of a DELETED event this watch makes up: who it was, and the last version it delivered."""
        metadata: dict[str, Any] = {"name": key[1], "resourceVersion": version}
        if key[0]:
            metadata["namespace"] = key[0]
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}

    def _note(self, event: WatchEvent) -> None:
        version = resource_version(event.object)
        if version is not None:
            self.version = version
        if not self.relists:
            return
        if event.type is WatchEventType.DELETED:
            self.known.pop(_key(event.object), None)
        elif event.type is not WatchEventType.BOOKMARK:
            self.known[_key(event.object)] = version

    def run(self, start_version: str | None) -> Iterator[WatchEvent]:
        if start_version in (None, "", "0"):
            yield from self._relist(initial=True)
        else:
            self.version = start_version
        failures = 0
        policy = self.objects.api.policy
        while (remaining := self._remaining()) > 0:
            stream: Iterator[WatchEvent] | None = None
            try:
                stream = self.objects.api.inner.watch(
                    self.api_version,
                    self.kind,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    resource_version=self.version,
                    timeout_seconds=max(1, math.ceil(remaining)),
                    fields=self.fields,
                )
                delivered = False
                for event in stream:
                    failures, delivered = 0, True
                    self._note(event)
                    yield event
                    if self._remaining() <= 0:
                        return
                if not delivered and self._remaining() > 1.0:
                    # Closed early without a word (a server going down cleanly): do not spin.
                    policy.sleep(min(policy.backoff(failures), self._remaining()))
                    failures += 1
            except retry.Gone as exc:
                if not self.relists:
                    raise
                log.info("watch %s: %s; relisting", self.kind, exc.detail)
                yield from self._relist(initial=False)
            except retry.Retryable as exc:
                delay = min(policy.backoff(failures), max(self._remaining(), 0.0))
                if exc.retry_after is not None:
                    delay = min(exc.retry_after, max(self._remaining(), 0.0))
                log.info("watch %s interrupted (%s); resuming from %s in %.2fs", self.kind, exc, self.version, delay)
                failures += 1
                policy.sleep(delay)
            finally:
                close: Any = getattr(stream, "close", None)
                if close is not None:
                    close()
