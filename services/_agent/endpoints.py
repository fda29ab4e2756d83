"""The HTTP endpoints a component serves: ``/healthz``, ``/readyz``, ``/metrics`` and its own routes.

Why shared: the components still to come serve HTTP — data-exporter its metrics (R-EXPORTER), topo-master its
cluster view, gpu-scheduler the kube-scheduler extender protocol — and each needs the same three things around
its own routes: liveness, readiness that says why not, and Prometheus metrics of the process. One small
threaded server (the standard library's, no framework) serves them; a route is a function from the request
to a `Response`, so what a component decides stays testable without a socket.
"""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import prometheus_client

log = logging.getLogger(__name__)


@attrs.frozen
class Request:
    method: str
    path: str
    body: bytes = b""


@attrs.frozen
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, (text.rstrip("\n") + "\n").encode())


Route = Callable[[Request], Response]
Readiness = Callable[[], tuple[bool, str]]
"""Whether the component works now, and why (not): ``/readyz`` answers 200 or 503 with the reason."""

MAX_BODY = 1 << 20
"""The largest request body read (1 MiB): a bigger one is refused with 413, never buffered."""


class Endpoints:
    """A threaded HTTP server on ``host:port`` (port 0: any free one, see `port`) until `stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ready: Readiness,
        routes: Mapping[str, Route] | None = None,
        registry: prometheus_client.CollectorRegistry = prometheus_client.REGISTRY,
    ) -> None:
        self._routes: dict[str, Route] = {
            "/healthz": lambda _: Response.text(200, "ok"),
            "/readyz": lambda _: _readyz(ready),
            "/metrics": lambda _: Response(
                200, prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST
            ),
            **(routes or {}),
        }
        self._server = http.server.ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Endpoints:
        self._thread = threading.Thread(target=self._server.serve_forever, name="endpoints", daemon=True)
        self._thread.start()
        log.info("serving %s on port %d", ", ".join(sorted(self._routes)), self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, request: Request) -> Response:
        """The response to ``request`` (what the socket handler sends; tests call it directly too)."""
        route = self._routes.get(request.path.split("?", 1)[0])
        if route is None:
            return Response.text(404, f"no such endpoint: {request.path}; served: {', '.join(sorted(self._routes))}")
        try:
            return route(request)
        except Exception as exc:  # a failing route is a 500 with its reason, never a dead server
            log.exception("endpoint %s failed", request.path)
            return Response.text(500, f"{request.path} failed: {exc}")

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        endpoints = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self._send(Response.text(413, f"request body over {MAX_BODY} bytes"))
                    return
                body = self.rfile.read(length) if length else b""
                self._send(endpoints.answer(Request(self.command, self.path, body)))

            def _send(self, response: Response) -> None:
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                self.wfile.write(response.body)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per scrape is noise
                log.debug(format, *args)

        return Handler


def _readyz(ready: Readiness) -> Response:
    ok, reason = ready()
    return Response.text(200 if ok else 503, reason or ("ready" if ok else "not ready"))
