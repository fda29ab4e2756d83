"""The in-memory API server's state: every object by key, the kinds it serves, one resourceVersion counter and
the change history.

Why a module of its own: the verbs (`server`) decide what a request may do (faults, locating, admission,
preconditions, field ownership); this module keeps what every verb writes through, the way the real server's
storage does: a no-op write does not bump the version, ``metadata.generation`` counts spec changes, an object
with a deletionTimestamp and no finalizers is gone, every change is recorded for the watches, and a CRD that is
written is Established and its kinds served. Callers hold the server's lock.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core.errors import NotFound, NotServed
from metax_core.ports.cluster import WatchEventType
from metax_k8s.inmemory import kinds, ssa, watch

Key = tuple[str, str, str, str]  # api_version, kind, namespace, name


@attrs.define
class Stored:
    obj: dict[str, Any]
    managers: ssa.Managers
    times: dict[ssa.ManagerKey, str]


class Store:
    """What the server keeps, under its lock (the `threading.Condition` the watches wait on)."""

    def __init__(
        self,
        cond: threading.Condition,
        clock: Callable[[], dt.datetime],
        *,
        start_resource_version: int,
        history_limit: int,
    ) -> None:
        self.clock = clock
        self.kinds: dict[tuple[str, str], kinds.KindInfo] = {(k.api_version, k.kind): k for k in kinds.BUILTIN}
        self.objects: dict[Key, Stored] = {}
        self.version = start_resource_version
        self.history = watch.History(cond, start_resource_version, history_limit)

    def info(self, api_version: str, kind: str) -> kinds.KindInfo:
        info = self.kinds.get((api_version, kind))
        if info is None:
            raise NotServed("discover", f"{kind} {api_version}", "the API server does not serve this kind")
        return info

    def key(self, info: kinds.KindInfo, name: str, namespace: str | None) -> Key:
        return (info.api_version, info.kind, (namespace or "") if info.namespaced else "", name)

    def existing(
        self, verb: str, what: str, info: kinds.KindInfo, name: str, namespace: str | None
    ) -> tuple[Key, Stored]:
        """The stored object's key and record; NotFound (as the API server words it) when it does not exist."""
        key = self.key(info, name, namespace)
        stored = self.objects.get(key)
        if stored is None:
            raise NotFound(verb, what, f'{info.plural} "{name}" not found', 404)
        return key, stored

    def stamp(self) -> str:
        return self.clock().astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def render(self, info: kinds.KindInfo, stored: Stored) -> dict[str, Any]:
        obj = copy.deepcopy(stored.obj)
        managed = ssa.managed_fields(stored.managers, info.api_version, lambda k: stored.times.get(k, ""))
        if managed:
            obj["metadata"]["managedFields"] = managed
        return obj

    def record(
        self, info: kinds.KindInfo, type: WatchEventType, old: Mapping[str, Any] | None, new: Mapping[str, Any]
    ) -> None:
        namespace = (new.get("metadata") or {}).get("namespace") or ""
        self.history.record(watch.Change(self.version, info.api_version, info.kind, namespace, type, old, new))

    def commit(
        self,
        info: kinds.KindInfo,
        key: Key,
        before: Stored | None,
        after: dict[str, Any],
        managers: ssa.Managers,
        manager: str,
        op: str,
        sub: str,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Store ``after`` (already admitted) unless nothing changed; bump versions; record the change."""
        metadata = after["metadata"]
        if info.kind == "CustomResourceDefinition":
            # The real API server's apiextensions controllers accept the names and establish a CRD within
            # milliseconds of its write; readers (the operator's `crd.sync`) wait for exactly this condition.
            after["status"] = {
                **(after.get("status") or {}),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                ],
            }
        if before is not None:
            for carried in ("uid", "creationTimestamp", "deletionTimestamp", "generation", "resourceVersion"):
                if carried in before.obj["metadata"]:
                    metadata[carried] = before.obj["metadata"][carried]
                else:
                    metadata.pop(carried, None)
            if after == before.obj and managers == before.managers:
                return self.render(info, before)
            if info.generation and _spec_part(after) != _spec_part(before.obj):
                metadata["generation"] = int(metadata.get("generation", 1)) + 1
        else:
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = self.stamp()
            if info.generation:
                metadata["generation"] = 1
        times = dict(before.times) if before else {}
        times[(manager, op, sub)] = self.stamp()
        stored = Stored(after, managers, {k: v for k, v in times.items() if k in managers})
        if dry_run:
            return self.render(info, stored)
        self.version += 1
        metadata["resourceVersion"] = str(self.version)
        rendered = self.render(info, stored)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            self.objects.pop(key, None)
            self.record(info, WatchEventType.DELETED, before.obj if before else None, rendered)
            return rendered
        self.objects[key] = stored
        self.record(
            info, WatchEventType.MODIFIED if before else WatchEventType.ADDED, before.obj if before else None, rendered
        )
        if info.kind == "CustomResourceDefinition":
            for served in kinds.from_crd(after):
                self.kinds[(served.api_version, served.kind)] = served
        return rendered

    def remove(self, info: kinds.KindInfo, key: Key, stored: Stored) -> None:
        del self.objects[key]
        self.version += 1
        gone = self.render(info, stored)
        gone["metadata"]["resourceVersion"] = str(self.version)
        self.record(info, WatchEventType.DELETED, stored.obj, gone)


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
