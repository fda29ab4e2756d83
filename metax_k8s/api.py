"""`Api`: the seam between the cluster port classes and one Kubernetes API server, verb by verb.

Why a module of its own: the port classes (objects, nodes, events, lease), the retry wrapper
(`retry.RetryingApi`) and both servers (`client.HttpApi`, `inmemory.InMemoryApiServer`) all speak this
Protocol; keeping it apart from any of them keeps the imports one-way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from metax_core.ports.cluster import Fields, ObjectList, RawObject, Transform, WatchEvent

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


class Api(Protocol):
    """One Kubernetes API server, verb by verb. Errors are `retry.error_for` errors; nothing is retried."""

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The object; `NotFound` when it does not exist."""
        ...

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
        """Every matching object, fetched in pages; ``transform`` is applied to each item as its page arrives
        (the list keeps what it returns, and drops an item it maps to None), so a caller that needs a few
        fields of thousands of objects never holds all of them whole; ``fields``: only those of each item, decoded
        before ``transform`` (`metax_core.ports.cluster.Fields`)."""
        ...

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
        """One watch request: ends when the server closes it; `retry.Gone` when the version has expired. With
        ``fields``, each object has only those fields."""
        ...

    def create(self, obj: RawObject, *, field_manager: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        """POST; `Conflict` when it already exists. ``dry_run``: admitted and returned, not stored."""
        ...

    def replace(self, obj: RawObject, *, field_manager: str | None = None) -> dict[str, Any]:
        """PUT; `Conflict` when ``metadata.resourceVersion`` is not the current one."""
        ...

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
        """JSON merge patch (RFC 7386); a ``metadata.resourceVersion`` in it is a precondition."""
        ...

    def apply(
        self,
        obj: RawObject,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply; `Conflict` when another manager owns a field with a different value."""
        ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None: ...

    def evict(self, name: str, namespace: str) -> None:
        """The Eviction API (``pods/eviction``): the pod is deleted gracefully unless a PodDisruptionBudget allows no
        disruption now (a `ClusterError` with status 429, never retried here); `NotFound` when it is gone."""
        ...
