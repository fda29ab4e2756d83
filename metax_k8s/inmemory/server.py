"""The in-memory Kubernetes API server: `api.Api` without HTTP, for the demo and the fast tests.

Why at the `Api` level and not a fake of each port: the port code (`objects`, `nodes`, `events`, `lease`)
then runs unchanged against this server and against the real one, so the contract tests check the
server's semantics, which is where a fake can lie. What it keeps honest:

- one resourceVersion counter for everything; a no-op write does not bump it;
- optimistic concurrency (a stale resourceVersion is 409), AlreadyExists (409), NotFound (404), namespaces
  that must exist, finalizers and deletionTimestamp, ``metadata.generation`` where the real server counts it;
- server-side apply with field ownership per manager (`ssa`) and the status subresource;
- label and field selectors with the real grammar and the real "field label not supported" refusals;
- watches that start with synthetic ADDED events (no resourceVersion), deliver changes after a version,
  turn label changes into ADDED/DELETED for selective watchers, end with a bookmark, and fail with 410 for a
  version older than the retained history (the history starts at ``start_resource_version``, as a fresh
  watch cache does);
- CRDs: applying one makes its kind served, with defaults, pruning and validation from its schema.

Known differences, all on the side of refusing more or modelling less, never of accepting what the real
server refuses except where noted: lists are atomic for server-side apply (the real server merges some by
key); built-in kinds are not validated beyond names, labels and Events (a malformed Pod or DaemonSet is
accepted here: the integration suite applies real workloads); CEL rules are not evaluated; and a version
older than the history is always 410 here, while the real watch cache may replay it (until an API server
restart, after which it answers 410 too). `objects.K8sObjects.watch` handles both.

Test hooks the real server has no API for: `restart` (break every watch and drop the history),
`compact` (drop the history), `fail_next` (answer the next requests of a verb with an HTTP error).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from metax_core.cluster import eviction
from metax_core.errors import ClusterError, Conflict, NotFound
from metax_core.ports.cluster import Fields, ObjectList, RawObject, Transform, WatchEvent, WatchEventType
from metax_k8s import decoding, retry
from metax_k8s.client import target
from metax_k8s.inmemory import kinds, schema, select, ssa, store

log = logging.getLogger(__name__)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@attrs.define
class _Fault:
    verb: str
    status: int
    times: int
    retry_after: float | None


class InMemoryApiServer:
    """`api.Api` in memory; thread-safe. See the module docstring for what it models."""

    def __init__(
        self,
        *,
        clock: Callable[[], dt.datetime] = _utc_now,
        start_resource_version: int = 1000,
        history_limit: int = 10_000,
    ) -> None:
        self._cond = threading.Condition()
        self._store = store.Store(
            self._cond, clock, start_resource_version=start_resource_version, history_limit=history_limit
        )
        self._faults: list[_Fault] = []
        for name in kinds.SYSTEM_NAMESPACES:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, field_manager="system")

    # -- test hooks ----------------------------------------------------------------------------------

    def fail_next(self, verb: str, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        """Answer the next ``times`` requests of ``verb`` (get, list, watch, create, replace, patch, apply,
        delete) with HTTP ``status``; status 0 is no answer at all (`retry.Unavailable`)."""
        with self._cond:
            self._faults.append(_Fault(verb, status, times, retry_after))

    def pending_faults(self) -> int:
        with self._cond:
            return sum(f.times for f in self._faults)

    def compact(self) -> None:
        """Forget the change history: every older resourceVersion now gets 410 Gone."""
        with self._cond:
            self._store.history.forget(self._store.version, break_watches=False)

    def restart(self) -> None:
        """What clients see when the API server restarts: open watches break, the watch history is gone."""
        with self._cond:
            self._store.history.forget(self._store.version, break_watches=True)

    # -- plumbing ------------------------------------------------------------------------------------

    def _fault(self, verb: str, what: str) -> None:
        for fault in self._faults:
            if fault.verb == verb and fault.times > 0:
                fault.times -= 1
                self._faults = [f for f in self._faults if f.times > 0]
                if fault.status == 0:
                    raise retry.Unavailable(verb, what, "injected failure: no answer")
                detail = f"injected failure (HTTP {fault.status})"
                raise retry.error_for(verb, what, fault.status, detail, fault.retry_after)

    def _locate(self, obj: RawObject, verb: str) -> tuple[kinds.KindInfo, str, str | None]:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name")
        info = self._store.info(str(obj.get("apiVersion")), str(obj.get("kind")))
        if not isinstance(name, str) or not name:
            raise ClusterError(verb, info.kind, "the object has no metadata.name", 400)
        namespace = metadata.get("namespace") if info.namespaced else None
        if info.namespaced and not namespace:
            raise ClusterError(verb, target(info.kind, name), "a namespaced object needs metadata.namespace", 400)
        return info, name, namespace

    def _require_namespace(self, info: kinds.KindInfo, namespace: str | None, verb: str, what: str) -> None:
        if info.namespaced:
            ns = self._store.objects.get(("v1", "Namespace", "", namespace or ""))
            if ns is None:
                raise NotFound(verb, what, f'namespaces "{namespace}" not found', 404)
            if ns.obj["metadata"].get("deletionTimestamp"):
                raise ClusterError(verb, what, f"namespace {namespace} is being terminated", 403)

    def _precondition(self, body: RawObject, stored: store.Stored, verb: str, what: str) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "") and str(wanted) != stored.obj["metadata"]["resourceVersion"]:
            raise Conflict(
                verb,
                what,
                "the object has been modified; please apply your changes to the latest version and try again",
                409,
            )

    # -- verbs ----------------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        what = target(kind, name, namespace)
        with self._cond:
            self._fault("get", what)
            info = self._store.info(api_version, kind)
            _, stored = self._store.existing("get", what, info, name, namespace)
            return self._store.render(info, stored)

    def _matching(
        self, info: kinds.KindInfo, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> Callable[[Mapping[str, Any]], bool]:
        by_label = select.parse_label_selector(label_selector)
        by_field = select.parse_field_selector(field_selector, info.kind)

        def matches(obj: Mapping[str, Any]) -> bool:
            in_namespace = not (info.namespaced and namespace) or obj["metadata"].get("namespace") == namespace
            return in_namespace and by_label(obj) and by_field(obj)

        return matches

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
        with self._cond:
            self._fault("list", target(kind, None, namespace))
            info = self._store.info(api_version, kind)
            matches = self._matching(info, namespace, label_selector, field_selector)
            items: list[RawObject] = [
                self._store.render(info, stored)
                for key, stored in sorted(self._store.objects.items())
                if key[:2] == (info.api_version, info.kind) and matches(stored.obj)
            ]
            version = str(self._store.version)
        if fields is not None:  # what the real server's answer decodes to (`decoding.prune`)
            items = [decoding.prune(item, fields) for item in items]
        if transform is not None:  # outside the lock: a caller's function must not hold up the server
            items = [kept for kept in map(transform, items) if kept is not None]
        return ObjectList(items=items, resource_version=version)

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
        what = target(kind, None, namespace)
        with self._cond:
            self._fault("watch", what)
            info = self._store.info(api_version, kind)
            matches = self._matching(info, namespace, label_selector, field_selector)
            initial: list[WatchEvent] = []
            if resource_version in (None, "", "0"):
                initial = [
                    WatchEvent(WatchEventType.ADDED, self._store.render(info, stored))
                    for key, stored in sorted(self._store.objects.items())
                    if key[:2] == (info.api_version, info.kind) and matches(stored.obj)
                ]
                position = self._store.version
            else:
                position = int(str(resource_version))
                self._store.history.check(position, what)
            epoch = self._store.history.epoch
        deadline = time.monotonic() + timeout_seconds
        stream = self._store.history.stream(
            info, matches, what, initial, position, epoch, deadline, lambda: self._store.version
        )
        return stream if fields is None else _pruned(stream, fields)

    def create(self, obj: RawObject, *, field_manager: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        with self._cond:
            info, name, namespace = self._locate(obj, "create")
            what = target(info.kind, name, namespace)
            self._fault("create", what)
            key = self._store.key(info, name, namespace)
            if key in self._store.objects:
                raise Conflict("create", what, f'{info.plural} "{name}" already exists', 409)
            self._require_namespace(info, namespace, "create", what)
            body = copy.deepcopy(dict(obj))
            body["metadata"].pop("resourceVersion", None)
            if info.status:
                body.pop("status", None)
            admitted = schema.admit(info, body, what, strict=True)
            manager = field_manager or "unknown"
            managers = ssa.update(None, admitted, {}, manager, status_only=False, has_status=info.status)
            return self._store.commit(info, key, None, admitted, managers, manager, "Update", "", dry_run=dry_run)

    def replace(self, obj: RawObject, *, field_manager: str | None = None) -> dict[str, Any]:
        with self._cond:
            info, name, namespace = self._locate(obj, "replace")
            what = target(info.kind, name, namespace)
            self._fault("replace", what)
            key, stored = self._store.existing("replace", what, info, name, namespace)
            if info.custom and not (obj.get("metadata") or {}).get("resourceVersion"):
                raise ClusterError("replace", what, "metadata.resourceVersion: must be specified for an update", 422)
            self._precondition(obj, stored, "replace", what)
            return self._write(info, key, stored, copy.deepcopy(dict(obj)), field_manager, what)

    def _write(
        self,
        info: kinds.KindInfo,
        key: store.Key,
        stored: store.Stored,
        body: dict[str, Any],
        field_manager: str | None,
        what: str,
    ) -> dict[str, Any]:
        """Replace the main resource of ``stored`` with ``body`` (non-apply write)."""
        body.setdefault("metadata", {}).pop("managedFields", None)
        if info.status and "status" in stored.obj:
            body["status"] = copy.deepcopy(stored.obj["status"])
        elif info.status:
            body.pop("status", None)
        admitted = schema.admit(info, body, what, strict=True)
        manager = field_manager or "unknown"
        managers = ssa.update(stored.obj, admitted, stored.managers, manager, status_only=False, has_status=info.status)
        return self._store.commit(info, key, stored, admitted, managers, manager, "Update", "")

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
        what = target(kind, name, namespace)
        with self._cond:
            self._fault("patch", what)
            info = self._store.info(api_version, kind)
            key, stored = self._store.existing("patch", what, info, name, namespace)
            self._precondition(patch, stored, "patch", what)
            patched = _merge(copy.deepcopy(stored.obj), patch)
            return self._write(info, key, stored, patched, field_manager, what)

    def apply(
        self,
        obj: RawObject,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self._cond:
            info, name, namespace = self._locate(obj, "apply")
            what = target(info.kind, name, namespace)
            self._fault("apply", what)
            status_only = subresource == "status"
            if subresource not in (None, "status") or (status_only and not info.status):
                raise NotFound("apply", what, f"the server could not find the requested resource ({subresource})", 404)
            key = self._store.key(info, name, namespace)
            stored = self._store.objects.get(key)
            if stored is None and status_only:
                raise NotFound("apply", what, f'{info.plural} "{name}" not found', 404)
            if stored is None:
                self._require_namespace(info, namespace, "apply", what)
            else:
                self._precondition(obj, stored, "apply", what)
            body = schema.admit(info, copy.deepcopy(dict(obj)), what, strict=True, typed=True)
            result, managers = ssa.apply(
                stored.obj if stored else None,
                stored.managers if stored else {},
                body,
                field_manager,
                force=force,
                status_only=status_only,
                has_status=info.status,
                what=what,
            )
            for identity in ("apiVersion", "kind"):
                result[identity] = body[identity]
            result.setdefault("metadata", {}).update({"name": name, **({"namespace": namespace} if namespace else {})})
            result = schema.admit(info, result, what, strict=False)
            return self._store.commit(
                info, key, stored, result, managers, field_manager, "Apply", subresource or "", dry_run=dry_run
            )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        what = target(kind, name, namespace)
        with self._cond:
            self._fault("delete", what)
            info = self._store.info(api_version, kind)
            key, stored = self._store.existing("delete", what, info, name, namespace)
            if stored.obj["metadata"].get("finalizers"):
                if not stored.obj["metadata"].get("deletionTimestamp"):
                    after = copy.deepcopy(stored.obj)
                    after["metadata"]["deletionTimestamp"] = self._store.stamp()
                    self._store.version += 1
                    after["metadata"]["resourceVersion"] = str(self._store.version)
                    self._store.objects[key] = store.Stored(after, stored.managers, stored.times)
                    self._store.record(
                        info, WatchEventType.MODIFIED, stored.obj, self._store.render(info, self._store.objects[key])
                    )
                return
            self._store.remove(info, key, stored)
            if info.kind == "Namespace":
                for other_key in [
                    k for k in self._store.objects if k[2] == name and self._store.info(k[0], k[1]).namespaced
                ]:
                    self._store.remove(
                        self._store.info(other_key[0], other_key[1]), other_key, self._store.objects[other_key]
                    )
            if info.kind == "CustomResourceDefinition":
                for served in kinds.from_crd(stored.obj):
                    self._store.kinds.pop((served.api_version, served.kind), None)
                    for other_key in [k for k in self._store.objects if k[:2] == (served.api_version, served.kind)]:
                        self._store.remove(served, other_key, self._store.objects[other_key])

    def evict(self, name: str, namespace: str) -> None:
        """As the real server: refused (429) while a PodDisruptionBudget of the pod's namespace that selects it
        allows no disruption (its status, which this server's tests write as the disruption controller would);
        else the pod is deleted."""
        what = target("Pod", name, namespace)
        with self._cond:
            self._fault("evict", what)
            _, stored = self._store.existing("evict", what, self._store.info("v1", "Pod"), name, namespace)
            labels = stored.obj["metadata"].get("labels") or {}
            for key, budget in self._store.objects.items():
                if key[:3] != ("policy/v1", "PodDisruptionBudget", namespace):
                    continue
                selector = (budget.obj.get("spec") or {}).get("selector")
                allowed = int((budget.obj.get("status") or {}).get("disruptionsAllowed") or 0)
                if eviction.selects(selector, labels) and allowed < 1:
                    detail = f"Cannot evict pod as it would violate the pod's disruption budget {key[3]}."
                    raise ClusterError("evict", what, detail, 429)
        self.delete("v1", "Pod", name, namespace)


def _merge(target_obj: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target_obj) if isinstance(target_obj, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _pruned(stream: Iterator[WatchEvent], fields: Fields) -> Iterator[WatchEvent]:
    """``stream``'s events, each object with only ``fields`` (`decoding.prune`), as the real server's decode to."""
    try:
        for event in stream:
            yield WatchEvent(event.type, decoding.prune(event.object, fields))
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
