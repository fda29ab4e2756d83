"""Server-side apply with one field manager, skipped when nothing changed; pruning; the ownership rule.

Why a module of its own: "zero writes in steady state" and "never touch what is not ours" are rules about
every object the operator writes, so they live in one place:

- every object carries the hash of its desired manifest (annotation ``metax-tech.com/desired-hash``); an
  object is applied again only when that hash differs, when it is missing, or when someone else changed it
  since our last apply (its ``metadata.generation`` — or ``resourceVersion`` for kinds without one — moved);
  a hand edit of a field we own is thus put back (``force``: we take our fields back), a field we do not
  own is left alone (SSA only sends ours);
- an object of the same name that lacks our ``app.kubernetes.io/managed-by`` label is never touched: the
  apply is refused and the component reports Failed; the refusal is logged with a Warning Event once per
  object and reason (again only when the object is replaced or the reason changes, or after it was
  resolved), so a steady state stays quiet;
- pruning deletes only objects that carry our label; `Applier.prune_absent` remembers what it made sure is
  gone, so a component that stays disabled costs no request per reconcile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from metax_core.cluster import workloads
from metax_core.errors import MetaxError, NotServed
from metax_core.ports.cluster import Events, EventType, ObjectRef, Objects, RawObject
from metax_core.wire import event_reasons, meta

log = logging.getLogger(__name__)

HASH_ANNOTATION = meta.DESIRED_HASH


class NotOurs(MetaxError):
    """An object with the name we need exists but does not carry our managed-by label."""


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def ours(obj: RawObject | None) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(workloads.MANAGED_BY_LABEL) == workloads.MANAGED_BY


def ref_of(obj: RawObject) -> ObjectRef:
    metadata = obj.get("metadata") or {}
    return ObjectRef(
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(metadata.get("name")),
        metadata.get("namespace"),
        metadata.get("uid"),
    )


def node_event(events: Events, node: str, reason: str, message: str, *, warning: bool, action: str) -> None:
    """An Event on a Node (the drain's, the GPU health's), logged as it is sent."""
    log.info("node %s: %s", node, message)
    events.emit(
        ObjectRef("v1", "Node", node),
        reason=reason,
        message=message,
        type=EventType.WARNING if warning else EventType.NORMAL,
        action=action,
    )


def _stamp(obj: RawObject) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("generation") or f"rv{metadata.get('resourceVersion')}")


class Applier:
    def __init__(self, objects: Objects, events: Events, *, field_manager: str) -> None:
        self.objects = objects
        self.events = events
        self.field_manager = field_manager
        self._applied: dict[tuple[str, str, str], str] = {}
        self._refused: dict[tuple[str, str, str], tuple[str, str]] = {}
        """Refusals already reported: object key → (uid, reason)."""
        self._gone: set[tuple[str, str, str]] = set()
        """Objects `prune_absent` made sure are gone (or found not ours) since they were last applied."""
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop what we remember (a new leader term re-applies and re-checks everything once)."""
        with self._lock:
            self._applied.clear()
            self._gone.clear()

    def _refuse(self, key: tuple[str, str, str], manifest: Mapping[str, Any], live: RawObject) -> NotOurs:
        message = (
            f"{key[0]} {key[1]}/{key[2]} exists without label {workloads.MANAGED_BY_LABEL}="
            f"{workloads.MANAGED_BY}: not touching it; delete or rename it to let the operator create its own"
        )
        uid = str((live.get("metadata") or {}).get("uid") or "")
        with self._lock:
            first = self._refused.get(key) != (uid, message)
            self._refused[key] = (uid, message)
        if first:
            log.warning("%s", message, extra={"object": f"{key[0]}/{key[2]}"})
            self.events.emit(
                ref_of({"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], **live}),
                reason=event_reasons.REFUSED,
                message=message,
                type=EventType.WARNING,
                action="Apply",
            )
        else:
            log.debug("%s (reported before)", message)
        return NotOurs(message)

    def apply(self, manifest: Mapping[str, Any], live: RawObject | None, *, creator: bool = False) -> RawObject:
        """``manifest`` applied unless ``live`` already is it; returns the live object."""
        metadata = manifest["metadata"]
        key = (str(manifest["kind"]), str(metadata.get("namespace") or ""), str(metadata["name"]))
        digest = manifest_hash(manifest)
        if live is None:
            live = self.objects.get(
                manifest["apiVersion"], manifest["kind"], metadata["name"], metadata.get("namespace")
            )
        if live is not None and not ours(live):
            raise self._refuse(key, manifest, live)
        with self._lock:
            self._refused.pop(key, None)
            self._gone.discard(key)
        if live is not None:
            annotations = (live.get("metadata") or {}).get("annotations") or {}
            with self._lock:
                remembered = self._applied.get(key)
            if annotations.get(HASH_ANNOTATION) == digest and (creator or remembered == _stamp(live)):
                return live
        body = dict(manifest)
        body["metadata"] = {**metadata, "annotations": {**(metadata.get("annotations") or {}), HASH_ANNOTATION: digest}}
        result = self.objects.apply(body, field_manager=self.field_manager, force=True)
        with self._lock:
            self._applied[key] = _stamp(result)
        changed = live is None or (live.get("metadata") or {}).get("resourceVersion") != (
            result.get("metadata") or {}
        ).get("resourceVersion")
        if changed:
            what = "created" if live is None else "updated"
            log.info("%s %s/%s %s", key[0], key[1], key[2], what, extra={"object": f"{key[0]}/{key[2]}"})
            self.events.emit(
                ref_of(result), reason=event_reasons.APPLIED, message=f"{key[0]} {key[2]} {what} by the operator"
            )
        return result

    def create_once(self, manifest: Mapping[str, Any], live: RawObject | None) -> bool:
        """Create ``manifest`` if absent; never update it (``driver-config``: the administrator's file)."""
        metadata = manifest["metadata"]
        if live is None:
            live = self.objects.get(
                manifest["apiVersion"], manifest["kind"], metadata["name"], metadata.get("namespace")
            )
        if live is not None:
            return False
        self.objects.apply(manifest, field_manager=self.field_manager)
        log.info("%s %s/%s created with defaults", manifest["kind"], metadata.get("namespace"), metadata["name"])
        self.events.emit(
            ref_of(manifest), reason=event_reasons.CREATED, message=f"{manifest['kind']} {metadata['name']} created"
        )
        return True

    def prune(self, live: RawObject, why: str) -> None:
        """Delete ``live`` (only if it is ours)."""
        if not ours(live):
            return
        metadata = live.get("metadata") or {}
        api_version, kind = str(live.get("apiVersion") or ""), str(live.get("kind") or "")
        if self.objects.delete(api_version, kind, str(metadata.get("name")), metadata.get("namespace")):
            log.info("%s %s/%s deleted: %s", kind, metadata.get("namespace"), metadata.get("name"), why)
            self.events.emit(
                ref_of(live),
                reason=event_reasons.PRUNED,
                message=f"{kind} {metadata.get('name')} deleted: {why}",
                type=EventType.NORMAL,
            )

    def prune_absent(self, manifests: Iterable[Mapping[str, Any]], why: str) -> None:
        """Make sure each of ``manifests`` is gone: delete the live object if it is ours, leave it if not.

        What was made sure of once is not looked up again until it is applied again (or a new term begins).
        """
        for manifest in manifests:
            metadata = manifest["metadata"]
            key = (str(manifest["kind"]), str(metadata.get("namespace") or ""), str(metadata["name"]))
            with self._lock:
                if key in self._gone:
                    continue
            try:
                live = self.objects.get(manifest["apiVersion"], manifest["kind"], metadata["name"], key[1] or None)
                if live is not None and not ours(live):
                    log.info("%s %s/%s left alone: it is not ours (%s)", key[0], key[1], key[2], why)
                elif live is not None:
                    self.prune({"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], **live}, why)
            except NotServed:
                pass  # a kind the cluster does not serve has no object (DeviceClasses before Kubernetes 1.34)
            except MetaxError as exc:
                log.warning("%s %s/%s: could not prune (%s); trying again next reconcile", *key, exc)
                continue
            with self._lock:
                self._gone.add(key)
