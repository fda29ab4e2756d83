"""Shared helpers for the cluster contract suite: one `Cluster` per adapter, fake clocks, a fault proxy.

A `Cluster` hides which API server is underneath (the in-memory one, or the real kube-apiserver of the test
control plane) behind the same handful of things a test needs: a fresh namespace, the port classes, a
way to restart the server, and a way to make the next requests fail. Nothing here mocks our code: faults
come from the in-memory server's own hook, or from `FaultProxy`, a small HTTP proxy on 127.0.0.1 in front
of the real API server that answers chosen requests with an error and forwards everything else.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import attrs
import kubernetes

from metax_core.errors import ClusterError
from metax_core.ports.cluster import WatchEvent
from metax_k8s import client, events, lease, nodes, objects, retry
from metax_k8s.api import APPLY_PATCH, Api

WIDGET_GROUP = "test.metax-tech.com"
WIDGET_API = f"{WIDGET_GROUP}/v1"
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{WIDGET_GROUP}"},
    "spec": {
        "group": WIDGET_GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "minimum": 0, "default": 1},
                                    "color": {"type": "string", "enum": ["red", "green"]},
                                    "owner": {"type": "string"},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}, "ready": {"type": "integer"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}
"""A namespaced test-only CRD with a status subresource: status tests need not touch cluster-operator."""


class FakeClock:
    """Wall time and monotonic time that move together, only when told to.

    Calling it gives the UTC wall time (starting at the real now: servers may check times); `monotonic`
    gives the matching monotonic reading.
    """

    def __init__(self) -> None:
        self.start = dt.datetime.now(dt.UTC).replace(microsecond=0)
        self.offset = 0.0

    def __call__(self) -> dt.datetime:
        return self.start + dt.timedelta(seconds=self.offset)

    @property
    def now(self) -> dt.datetime:
        return self()

    def monotonic(self) -> float:
        return 1000.0 + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class RecordingSleep:
    """A `RetryPolicy.sleep` that records the delays and sleeps only a token amount."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(min(seconds, 0.01))


class Faults(Protocol):
    """Make the next requests of a verb fail with an HTTP status (0: the connection drops, no answer)."""

    def fail_next(self, verb: str, status: int, *, times: int = 1, retry_after: float | None = None) -> None: ...

    def pending_faults(self) -> int: ...


@attrs.define
class Cluster:
    """One adapter under test, with a namespace of its own."""

    name: str
    api: Api
    namespace: str
    restart: Callable[[], None]
    """Restart the API server: open watches break, clients reconnect."""
    compact: Callable[[], None]
    """Drop the server's change history: watches from older versions get 410 Gone."""
    faulty: Callable[[], tuple[Api, Faults]]
    clock: FakeClock = attrs.field(factory=FakeClock)
    cleanups: list[Callable[[], None]] = attrs.field(factory=list)

    def objects(self, policy: retry.RetryPolicy | None = None, api: Api | None = None) -> objects.K8sObjects:
        return objects.K8sObjects(api or self.api, policy=policy)

    def node_metadata(self, field_manager: str = "metax-gpu-label", api: Api | None = None) -> nodes.K8sNodeMetadata:
        return nodes.K8sNodeMetadata(api or self.api, field_manager=field_manager)

    def events(self, instance: str = "test-0", **options: Any) -> events.K8sEvents:
        options.setdefault("clock", self.clock)
        api = options.pop("api", None) or self.api
        return events.K8sEvents(
            api, reporting_controller="metax-tech.com/operator", reporting_instance=instance, **options
        )

    def lease(self, identity: str, name: str = "metax-operator", **options: Any) -> lease.K8sLeaseLock:
        return lease.K8sLeaseLock(
            self.api,
            name=name,
            namespace=self.namespace,
            identity=identity,
            monotonic=self.clock.monotonic,
            wall_clock=self.clock,
            **options,
        )

    def add_node(self, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> str:
        name = f"node-{uuid.uuid4().hex[:8]}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        }
        self.api.create(body, field_manager="kubelet")
        self.cleanups.append(lambda: _quietly(lambda: self.api.delete("v1", "Node", name)))
        return name

    def configmap(
        self, name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.namespace, **({"labels": labels} if labels else {})},
            **({"data": data} if data is not None else {}),
        }


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(ClusterError):
        fn()


def new_namespace(api: Api) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, field_manager="test")
    return name


def wait_served(api: Api, api_version: str, kind: str, timeout: float = 30.0) -> None:
    """Until the API server serves ``kind`` (a new CRD takes a moment to be established)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.list(api_version, kind)
            return
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class WatchCollector:
    """Consumes a watch on a thread; tests wait until an event they expect has been seen (in any order)."""

    def __init__(self, stream: Iterator[WatchEvent]) -> None:
        self.events: list[WatchEvent] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: Iterator[WatchEvent]) -> None:
        try:
            for event in stream:
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[WatchEvent], bool], timeout: float = 30.0) -> WatchEvent:
        """The first event seen so far (or within ``timeout``) that matches."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                if self.error is not None:
                    raise AssertionError(f"watch failed: {self.error!r}") from self.error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [(e.type.value, (e.object.get("metadata") or {}).get("name")) for e in self.events]
                    raise AssertionError(f"no matching watch event within {timeout}s; seen {seen}")
                self._cond.wait(remaining)


def named(event_type: str, name: str) -> Callable[[WatchEvent], bool]:
    return lambda e: e.type.value == event_type and (e.object.get("metadata") or {}).get("name") == name


def event_list(cluster: Cluster, namespace: str | None = None) -> list[dict[str, Any]]:
    """Our events (controllers of the real cluster may report in the same namespace)."""
    listing = cluster.objects().list("events.k8s.io/v1", "Event", namespace or cluster.namespace)
    return [e for e in listing.items if e.get("reportingController") == "metax-tech.com/operator"]


# -- a fault-injecting proxy in front of the real API server ---------------------------------------------


def classify(method: str, url: str, content_type: str | None) -> str:
    """The `Api` verb of an HTTP request, as `InMemoryApiServer.fail_next` names verbs."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    prefix = 2 if segments[:1] == ["api"] else 3
    rest = segments[prefix:]
    if not rest:
        return "discover"
    if method == "GET" and "true" in parse_qs(parts.query).get("watch", []):
        return "watch"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    named_object = len(rest) >= 2
    if method == "GET":
        return "get" if named_object else "list"
    if method == "PATCH":
        return "apply" if content_type == APPLY_PATCH else "patch"
    return {"POST": "create", "PUT": "replace", "DELETE": "delete"}.get(method, method.lower())


class FaultProxy:
    """HTTP on 127.0.0.1 → the real API server (with the upstream client's credentials), failing on demand."""

    def __init__(self, upstream: kubernetes.client.ApiClient) -> None:
        self.upstream = upstream
        self._faults: list[list[Any]] = []
        self._lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                verb = classify(self.command, self.path, self.headers.get("Content-Type"))
                fault = proxy._take(verb)
                if fault is not None and fault[0] == 0:
                    self.close_connection = True  # no answer at all
                    proxy.seen.append((verb, 0))
                    return
                if fault is not None:
                    status, retry_after = fault
                    payload = json.dumps(
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "message": f"injected failure for {verb}",
                            "code": status,
                        }
                    ).encode()
                    self.send_response(status)
                    if retry_after is not None:
                        self.send_header("Retry-After", str(int(retry_after)))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    proxy.seen.append((verb, status))
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
                response = proxy.upstream.rest_client.pool_manager.request(
                    self.command,
                    proxy.upstream.configuration.host + self.path,
                    body=body,
                    headers=headers,
                    retries=False,
                    preload_content=True,
                )
                proxy.seen.append((verb, response.status))
                self.send_response(response.status)
                self.send_header("Content-Type", response.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(response.data)))
                self.end_headers()
                self.wfile.write(response.data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def api(self) -> client.HttpApi:
        return client.HttpApi(kubernetes.client.ApiClient(kubernetes.client.Configuration(host=self.url)))

    def fail_next(self, verb: str, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        with self._lock:
            self._faults.append([verb, status, times, retry_after])

    def pending_faults(self) -> int:
        with self._lock:
            return sum(f[2] for f in self._faults)

    def _take(self, verb: str) -> tuple[int, float | None] | None:
        with self._lock:
            for fault in self._faults:
                if fault[0] == verb and fault[2] > 0:
                    fault[2] -= 1
                    return fault[1], fault[3]
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
