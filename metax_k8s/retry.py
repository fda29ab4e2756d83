"""Errors an `Api` raises, and the one retry policy every cluster adapter shares.

Why a module of its own: the real API server and the in-memory one fail the same ways (HTTP 409, 410, 429,
5xx, connection lost), and the port code on top of them must react the same way whichever is underneath.
So both raise the errors below (all `metax_core.errors.ClusterError`s, so callers above the port need
nothing from here) and the port classes wrap their `Api` in `RetryingApi`.

Policy:
- 429 and 5xx and lost connections are retried with exponential back-off and full jitter (base 0.2 s,
  capped at 5 s, 6 attempts); a ``Retry-After`` from the server wins over the back-off (capped at 30 s).
- 409 is retried only by `RetryPolicy.call(..., conflicts=True)`, around a read-modify-write function that
  re-reads before it writes again; server-side apply never needs that (a 409 there is an ownership
  conflict, which retrying cannot fix), nor do merge patches without a resourceVersion.
- 410 (`Gone`) is not retried here: watches relist instead (`objects.K8sObjects.watch`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import attrs

from metax_core.errors import ClusterError, Conflict, Expired, NotFound
from metax_core.ports.cluster import Fields, ObjectList, RawObject, Transform, WatchEvent
from metax_k8s.api import Api

log = logging.getLogger(__name__)

T = TypeVar("T")


class Retryable(ClusterError):
    """The server is overloaded (429) or failing (5xx): the same request may succeed later."""

    def __init__(
        self, verb: str, target: str, detail: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(verb, target, detail, status)
        self.retry_after = retry_after


class Unavailable(Retryable):
    """No HTTP answer at all: connection refused or reset, or a client-side timeout."""


class Gone(Expired):
    """HTTP 410: the resourceVersion a watch (or list continuation) asked for has been compacted away."""


def error_for(verb: str, target: str, status: int, detail: str, retry_after: float | None = None) -> ClusterError:
    """The port-level error for an HTTP status (and the server's message)."""
    if status == 404:
        return NotFound(verb, target, detail, status)
    if status == 409:
        return Conflict(verb, target, detail, status)
    if status == 410:
        return Gone(verb, target, detail, status)
    if status == 500 and "failed to create typed patch object" in detail:
        # Server-side apply answers a malformed apply configuration (unknown field, wrong type) with a 500;
        # the same request can never succeed, so it is not retried.
        return ClusterError(verb, target, detail, status)
    if status == 429 or status >= 500:
        return Retryable(verb, target, detail, status, retry_after)
    return ClusterError(verb, target, detail, status)


@attrs.frozen
class RetryPolicy:
    """How often and how patiently to retry; ``sleep`` and ``rng`` are injectable for tests."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 5.0
    max_retry_after: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = attrs.field(factory=random.Random)

    def backoff(self, attempt: int) -> float:
        """Full-jitter exponential back-off for the ``attempt``-th retry (0-based)."""
        ceiling = min(self.max_delay, self.base_delay * (2**attempt))
        return self.rng.uniform(ceiling / 2, ceiling)

    def call(self, fn: Callable[[], T], *, conflicts: bool = False) -> T:
        """``fn()``, retried on `Retryable` errors (and on `Conflict` when ``conflicts``)."""
        for attempt in range(self.attempts):
            last = attempt == self.attempts - 1
            try:
                return fn()
            except Retryable as exc:
                if last:
                    raise
                delay = self.backoff(attempt)
                if exc.retry_after is not None:
                    delay = min(max(exc.retry_after, 0.0), self.max_retry_after)
                log.info("%s; retrying in %.2fs (attempt %d of %d)", exc, delay, attempt + 2, self.attempts)
                self.sleep(delay)
            except Conflict as exc:
                if not conflicts or last:
                    raise
                delay = self.backoff(attempt)
                log.info("%s; re-reading and retrying in %.2fs", exc, delay)
                self.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")


class RetryingApi:
    """An `Api` whose one-shot requests are retried by a `RetryPolicy` (watches are not: see objects.py)."""

    def __init__(self, api: Api, policy: RetryPolicy | None = None) -> None:
        self.inner = api
        self.policy = policy if policy is not None else RetryPolicy()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.policy.call(lambda: self.inner.get(api_version, kind, name, namespace))

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        fields: Fields | None = None,
    ) -> ObjectList:
        return self.policy.call(
            lambda: self.inner.list(
                api_version,
                kind,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=transform,
                fields=fields,
            )
        )

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        fields: Fields | None = None,
    ) -> Iterator[WatchEvent]:
        return self.inner.watch(
            api_version,
            kind,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            fields=fields,
        )

    def create(self, obj: RawObject, *, field_manager: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        return self.policy.call(lambda: self.inner.create(obj, field_manager=field_manager, dry_run=dry_run))

    def replace(self, obj: RawObject, *, field_manager: str | None = None) -> dict[str, Any]:
        return self.policy.call(lambda: self.inner.replace(obj, field_manager=field_manager))

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: RawObject,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        return self.policy.call(
            lambda: self.inner.merge_patch(
                api_version, kind, name, patch, namespace=namespace, field_manager=field_manager
            )
        )

    def apply(
        self,
        obj: RawObject,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        return self.policy.call(
            lambda: self.inner.apply(
                obj, field_manager=field_manager, force=force, subresource=subresource, dry_run=dry_run
            )
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self.policy.call(lambda: self.inner.delete(api_version, kind, name, namespace))

    def evict(self, name: str, namespace: str) -> None:
        """A budget's refusal (429) is not retried (the inner `Api.evict` raises it as a plain `ClusterError`)."""
        self.policy.call(lambda: self.inner.evict(name, namespace))
