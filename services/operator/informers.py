"""Watches that keep a local copy of what the operator reads, and wake the work queue when it matters.

Why: a level-triggered reconcile reads the ClusterOperator, its ConfigMaps, the nodes and everything it owns
on every run; reading them from the API each time would cost thousands of requests per minute at 1,000
nodes. Each `Informer` lists once, then watches (`metax_k8s.objects` resumes broken watches and relists on
410), keeps the objects — slimmed to the fields the operator reads, to keep memory small — and calls
``on_change`` with the old and new copy, so a caller can ignore changes that do not matter (a node's
heartbeat, for instance).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from metax_core.cluster import gpu_remediation, workloads
from metax_core.errors import Expired, MetaxError, NotServed
from metax_core.health.report import ANNOTATION as HEALTH_REPORT
from metax_core.health.report import node_condition
from metax_core.node import uninstall
from metax_core.node.labels import PREFIX
from metax_core.ports.cluster import Fields, Objects, RawObject, WatchEventType
from metax_core.rollout import fleet
from metax_core.wire import driver_verdict
from services.operator.cached_pod import CachedPod

log = logging.getLogger(__name__)

Key = str | tuple[str, str]
"""What a cache files an object under: its name in a namespaced cache, else (namespace, name) (`Informer.key`)."""
Slim = Callable[[RawObject], RawObject]
OnChange = Callable[[RawObject | None, RawObject | None], None]
IndexBy = Callable[[RawObject], str | None]
"""What an informer files each cached object under (`Informer.indexed`); None: not filed."""
TallyBy = Callable[[RawObject], Hashable | None]
"""What an informer counts each cached object under (`Informer.tallied`); None: not counted."""


def key_of(obj: RawObject) -> tuple[str, str]:
    """(namespace, name); the namespace interned: thousands of cached keys hold one copy of it, not one each."""
    metadata = obj.get("metadata") or {}
    return (sys.intern(str(metadata.get("namespace") or "")), str(metadata.get("name") or ""))


def name_of(obj: RawObject) -> str:
    """The name alone: the key in a cache of one namespace."""
    return str((obj.get("metadata") or {}).get("name") or "")


NOT_SERVED_RETRY_SECONDS = 300.0
"""How often an informer of a kind the cluster does not serve asks discovery again."""


class Informer:
    def __init__(
        self,
        objects: Objects,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        slim: Slim | None = None,
        on_change: OnChange | None = None,
        watch_seconds: int = 300,
        index_by: IndexBy | None = None,
        tally_by: TallyBy | None = None,
        fields: Fields | None = None,
    ) -> None:
        """``index_by``: what each object is filed under as well, so `indexed` hands out the objects of one value
        without a scan of the whole cache (the pods by component: a reconcile at 5,000 nodes reads the driver's
        5,000 pods, not all 35,000). ``tally_by``: what each object is counted under, so `tallied` names the values
        some object has without a scan (each pod's node and whether it is Ready; a count per value, not a dict of
        objects). ``fields``: what ``slim`` reads of each object (`cached_fields`), the only fields the list and
        the watch decode."""
        self.objects = objects
        self.api_version, self.kind = api_version, kind
        self.namespace, self.label_selector = namespace, label_selector
        self.field_selector = field_selector
        self._slim = slim or (lambda o: o)
        self._on_change = on_change or (lambda old, new: None)
        self._watch_seconds = watch_seconds
        self.key: Callable[[RawObject], Key] = key_of if namespace is None else name_of
        """An object's key in this cache: its name when the cache holds one namespace (35,000 pods at 5,000 nodes:
        a tuple each is 2 MiB), else (namespace, name)."""
        self._items: dict[Key, RawObject] = {}
        self._index_by = index_by
        self._fields = fields
        self._index: dict[str, dict[Key, RawObject]] = {}
        self._tally_by = tally_by
        self._tally: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.synced = threading.Event()
        self._thread: threading.Thread | None = None

    def items(self) -> list[RawObject]:
        with self._lock:
            return list(self._items.values())

    def get(self, name: str, namespace: str | None = None) -> RawObject | None:
        if self.namespace is not None:
            if (namespace or "") != self.namespace:
                return None
            with self._lock:
                return self._items.get(name)
        with self._lock:
            return self._items.get((namespace or "", name))

    def indexed(self, value: str) -> list[RawObject]:
        """The cached objects filed under ``value`` by ``index_by`` (none without an index)."""
        with self._lock:
            return list(self._index.get(value, {}).values())

    def tallied(self) -> frozenset[Any]:
        """The values ``tally_by`` gives at least one cached object (empty without a tally)."""
        with self._lock:
            return frozenset(self._tally)

    def _count(self, old: RawObject | None, new: RawObject | None) -> None:
        """Keep the tally in step with one change (under the lock)."""
        if self._tally_by is None:
            return
        before = None if old is None else self._tally_by(old)
        after = None if new is None else self._tally_by(new)
        if before == after:
            return
        if before is not None:
            left = self._tally.get(before, 0) - 1
            if left > 0:
                self._tally[before] = left
            else:
                self._tally.pop(before, None)
        if after is not None:
            self._tally[after] = self._tally.get(after, 0) + 1

    def _file(self, key: Key, old: RawObject | None, new: RawObject | None) -> None:
        """Keep the index and the tally in step with one change (under the lock)."""
        self._count(old, new)
        if self._index_by is None:
            return
        value = None if new is None else self._index_by(new)
        if old is not None and (before := self._index_by(old)) is not None and before != value:
            filed = self._index.get(before)
            if filed is not None:
                filed.pop(key, None)
                if not filed:
                    del self._index[before]
        if new is not None and value is not None:  # an object that stays filed keeps its place (as in `items`)
            self._index.setdefault(value, {})[key] = new

    def _apply(self, kind: WatchEventType, obj: RawObject, *, slimmed: bool = False) -> None:
        key = self.key(obj)
        with self._lock:
            old = self._items.get(key)
            if kind is WatchEventType.DELETED:
                self._items.pop(key, None)
                new = None
            else:
                new = obj if slimmed else self._slim(obj)
                self._items[key] = new
            self._file(key, old, new)
        if old is not new:
            self._on_change(old, new)

    def _relist(self) -> str:
        """List (slimmed page by page: the whole objects are never all held) and replace the cache; the version.

        A method of its own so the listing dies with its frame: kept in the loop's locals, it would pin the
        first copy of every object for as long as the watch runs.
        """
        listing = self.objects.list(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            transform=self._slim,
            fields=self._fields,
        )
        listed = {self.key(o): o for o in listing.items}
        with self._lock:
            gone = [o for k, o in self._items.items() if k not in listed]
        for obj in gone:
            self._apply(WatchEventType.DELETED, obj)
        for obj in listed.values():
            self._apply(WatchEventType.ADDED, obj, slimmed=True)
        return listing.resource_version

    def _loop(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                    self.synced.set()
                stream = self.objects.watch(
                    self.api_version,
                    self.kind,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    resource_version=version,
                    timeout_seconds=self._watch_seconds,
                    fields=self._fields,
                    relist=False,  # `_relist` below does it from the cache, which knows every object already
                )
                for event in stream:
                    if self._stop.is_set():
                        return
                    rv = (event.object.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        version = str(rv)
                    if event.type is not WatchEventType.BOOKMARK:
                        self._apply(event.type, event.object)
            except NotServed:
                # A kind this cluster does not serve (DeviceClasses before Kubernetes 1.34) has no objects: the
                # empty cache is the truth. Looked for again now and then, quietly (a cluster upgraded under us).
                if not self.synced.is_set():
                    log.info("%s %s is not served by this cluster: none cached", self.kind, self.api_version)
                with self._lock:
                    self._items.clear()
                    self._index.clear()
                    self._tally.clear()
                self.synced.set()
                version = None
                self._stop.wait(NOT_SERVED_RETRY_SECONDS)
            except Expired as exc:  # the version is compacted away: the cache lists again at once
                log.info("watch %s: %s; relisting", self.kind, exc.detail)
                version = None
            except MetaxError as exc:
                log.warning("watch %s: %s; relisting in 1s", self.kind, exc)
                version = None
                self._stop.wait(1.0)
            except Exception:  # a watch thread must never die silently; the next relist recovers
                log.exception("watch %s failed; relisting in 1s", self.kind)
                version = None
                self._stop.wait(1.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"watch-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


#: Pod labels the operator reads or selects by: its component, its workload (gpu-discovery's pods answer no uninstall
#: request, `metax_core.cluster.node_undos`), and the DaemonSet controller's revision.
KEPT_ANNOTATIONS = frozenset({driver_verdict.ANNOTATION, HEALTH_REPORT, gpu_remediation.HISTORY_ANNOTATION})
"""The product's node annotations whose values the node cache keeps."""
POD_LABELS = frozenset({workloads.COMPONENT_LABEL, workloads.APP_LABEL, "controller-revision-hash"})
_NO_WAITING: tuple[str, ...] = ()


SHARED_LIMIT = 16384
"""Distinct parts `_shared` keeps at most before it starts its table afresh (objects already sharing stay so)."""
_SHARED: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}


def _shared(part: dict[str, Any]) -> dict[str, Any]:
    """One dict for every equal ``part``: the pods of a fleet mostly have the same labels, status and annotations,
    and the pods of one node the same spec, so 35,000 cached pods hold a few thousand of these, not 140,000 (P3).
    Cached objects are read-only (`Informer.items` hands them out as they are), so sharing their parts is safe.
    The table is bounded: restart counts and revisions that come and go must not grow it for ever."""
    key = tuple(part.items())
    found = _SHARED.get(key)
    if found is not None:
        return found
    if len(_SHARED) >= SHARED_LIMIT:
        _SHARED.clear()
    _SHARED[key] = part
    return part


def _interned(value: Any) -> Any:
    """Strings repeated across thousands of objects (keys, node names, revisions, phases) stored once."""
    return sys.intern(value) if isinstance(value, str) else value


def _product(mapping: Mapping[str, Any] | None) -> dict[str, Any]:
    return {sys.intern(k): _interned(v) for k, v in (mapping or {}).items() if k.startswith(PREFIX)}


def slim_node(node: RawObject) -> RawObject:
    """A node as the operator reads it: its name, the product's labels, and the keys of the product's annotations.

    Annotation values are dropped (the operator only removes the keys when ``cluster-operator`` is deleted;
    some are kilobytes of JSON per node), except those in `KEPT_ANNOTATIONS` (driver-manager's verdict, read by the
    rollout; the GPU health report and the remediation history, read by `services.operator.gpu_health`: a few
    hundred bytes, and absent or tiny on a healthy node) and the few bytes of the uninstall protocol's request and
    answers (`metax_core.node.uninstall`), which the finalizer reads. Of the status only the ``MetaXGPUHealthy``
    condition is kept (the operator writes it only when it differs). Everything else is dropped too (the other
    conditions and their heartbeats, images, the other labels, taints): at 1,000 nodes the whole objects would
    be most of the operator's memory (P3). The nodes of a fleet mostly carry the same product labels: those are
    shared.
    """
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    health = node_condition(node)
    return {
        **({"status": {"conditions": [health]}} if health is not None else {}),
        "metadata": {
            "name": _interned(metadata.get("name")),
            "labels": _shared(_product(metadata.get("labels"))),
            "annotations": _shared(
                {
                    sys.intern(k): (str(v) if uninstall.is_protocol_key(k) or k in KEPT_ANNOTATIONS else "")
                    for k, v in annotations.items()
                    if k.startswith(PREFIX)
                }
            ),
        },
    }


def slim_pod(pod: RawObject) -> RawObject:
    """A pod as the operator reads it: where it runs, which component and revision, whether it is ready or failing.

    Kept: name, namespace, node, the labels in `POD_LABELS`, the product's annotations (the driver revision; the key
    only when there are some), the deletion time (only when set), phase, Ready, the restart count and the waiting
    reasons; and, of the pods of `fleet.TIMED_COMPONENTS` only, the creation and start times. Repeated strings are
    interned and equal parts shared (`_shared`): every pod but the driver's has one of a few shared statuses. The
    copy is a `CachedPod` (slots, read as the pod's mapping), so a cached pod costs about a third of a kilobyte (its
    name, its slots and its places in the cache and the index), not the tens of kilobytes of its whole object (P3:
    35,000 pods at 5,000 nodes).
    """
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    waiting = tuple(
        sys.intern(reason)
        for c in statuses
        if (reason := str(((c.get("state") or {}).get("waiting") or {}).get("reason") or ""))
    )
    labels = _shared(
        {sys.intern(k): _interned(v) for k, v in (metadata.get("labels") or {}).items() if k in POD_LABELS}
    )
    timed = labels.get(workloads.COMPONENT_LABEL) in fleet.TIMED_COMPONENTS  # every other status is shared
    extra: dict[str, Any] = {}
    if annotations := _product(metadata.get("annotations")):
        extra["annotations"] = _shared(annotations)
    if metadata.get("deletionTimestamp"):
        extra["deletionTimestamp"] = metadata["deletionTimestamp"]
    state: dict[str, Any] = {
        "phase": _interned(status.get("phase")),
        "ready": ready,
        "restarts": sum(int(c.get("restartCount") or 0) for c in statuses),
        "waiting": waiting or _NO_WAITING,
    }
    if timed:  # one of each per pod: not worth an entry in the table of shared parts
        extra["creationTimestamp"] = _interned(metadata.get("creationTimestamp"))  # a DaemonSet's pods share seconds
        state["startTime"] = status.get("startTime")  # a driver-manager verdict counts after it
    return CachedPod(
        name=str(metadata.get("name") or ""),
        namespace=_interned(metadata.get("namespace")),
        labels=labels,
        node=_interned((pod.get("spec") or {}).get("nodeName")),
        status=state if timed else _shared(state),
        extra=extra or None,
    )
