"""The extender's watch cache: every Node's facts and the GPUs the pods bound to each node request.

Why its own: with ``nodeCacheCapable`` kube-scheduler sends node names only, so the extender keeps the nodes
(their topology annotations and allocatable GPUs) and the bound pods itself, list-then-watch per kind, one
thread each, relisting after a watch fails. Lookups never touch the API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from metax_core.errors import ClusterError
from metax_core.ports.cluster import Objects, WatchEventType
from metax_core.topology import extender

log = logging.getLogger(__name__)

_LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class Cache:
    def __init__(self, objects: Objects, *, watch_seconds: int = 300, retry_seconds: float = 2.0) -> None:
        self.objects = objects
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._nodes: dict[str, extender.NodeFacts] = {}
        self._pods: dict[tuple[str, str], tuple[str, int]] = {}
        """(namespace, name) → (node it is bound to, GPUs it requests), for bound pods requesting GPUs."""
        self.synced = {"Node": threading.Event(), "Pod": threading.Event()}
        self._threads: list[threading.Thread] = []

    # --- reads ------------------------------------------------------------------------------------------------

    def snapshot(self) -> tuple[Mapping[str, extender.NodeFacts], Mapping[str, int]]:
        """Every node's facts and the GPUs in use per node, as of now."""
        with self._lock:
            used: dict[str, int] = {}
            for node, gpus in self._pods.values():
                used[node] = used.get(node, 0) + gpus
            return dict(self._nodes), used

    # --- writes (the watch threads, and tests feeding events) ----------------------------------------------------

    def put_node(self, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        if name:
            facts = extender.NodeFacts.of(node)
            if facts.problem:
                log.warning("node %s: %s", name, facts.problem)
            with self._lock:
                self._nodes[name] = facts

    def put_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        gpus = extender.gpus_requested(pod)
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            if node and gpus and phase not in ("Succeeded", "Failed") and not meta.get("deletionTimestamp"):
                self._pods[key] = (node, gpus)
            else:
                self._pods.pop(key, None)

    def _forget(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            if kind == "Node":
                self._nodes.pop(meta.get("name") or "", None)
            else:
                self._pods.pop((meta.get("namespace") or "", meta.get("name") or ""), None)

    # --- the watch threads ----------------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        for kind in ("Node", "Pod"):
            t = threading.Thread(target=self._run, args=(kind, stop), name=f"cache-{kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self, kind: str, stop: threading.Event) -> None:
        selector = _LIVE_PODS if kind == "Pod" else None
        put = self.put_node if kind == "Node" else self.put_pod
        while not stop.is_set():
            try:
                listing = self.objects.list("v1", kind, field_selector=selector)
                with self._lock:
                    if kind == "Node":
                        self._nodes.clear()
                    else:
                        self._pods.clear()
                for item in listing.items:
                    put(item)
                self.synced[kind].set()
                version = listing.resource_version
                while not stop.is_set():
                    for event in self.objects.watch(
                        "v1",
                        kind,
                        field_selector=selector,
                        resource_version=version,
                        timeout_seconds=self.watch_seconds,
                    ):
                        version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
                        if event.type is WatchEventType.DELETED:
                            self._forget(kind, event.object)
                        elif event.type is not WatchEventType.BOOKMARK:
                            put(event.object)
                        if stop.is_set():
                            return
            except ClusterError as exc:
                log.warning("watching %ss failed, relisting: %s", kind, exc)
                stop.wait(self.retry_seconds)
