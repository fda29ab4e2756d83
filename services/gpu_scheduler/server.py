"""The extender's HTTP endpoints: ``POST /filter``, ``POST /prioritize`` (kube-scheduler's extender protocol,
`metax_core.topology.extender`), ``GET /healthz`` (ready once both caches listed)."""

from __future__ import annotations

import http.server
import logging
import threading
from typing import Any

from metax_core.errors import InvalidSpec
from metax_core.topology import extender
from services.gpu_scheduler import cache

log = logging.getLogger(__name__)


def handler(state: cache.Cache) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path != "/healthz":
                self._answer(404, b'{"error": "not found"}')
            elif all(e.is_set() for e in state.synced.values()):
                self._answer(200, b'{"status": "ok"}')
            else:
                self._answer(503, b'{"status": "cache not synced"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            try:
                args = extender.parse_args(body)
            except InvalidSpec as exc:
                self._answer(400, extender.render_filter(extender.Verdict((), {}), error=str(exc)))
                return
            n = extender.gpus_requested(args.pod)
            facts, used = state.snapshot()
            if self.path == extender.FILTER_PATH:
                self._answer(200, extender.render_filter(extender.filter_nodes(n, args.node_names, facts, used)))
            elif self.path == extender.PRIORITIZE_PATH:
                self._answer(200, extender.render_priorities(extender.prioritize(n, args.node_names, facts)))
            else:
                self._answer(404, b'{"error": "not found"}')

    return Handler


class Server:
    """The extender on ``host:port`` (port 0: any free one), served from its own thread."""

    def __init__(self, state: cache.Cache, host: str = "0.0.0.0", port: int = extender.PORT) -> None:
        self.httpd = http.server.ThreadingHTTPServer((host, port), handler(state))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> Server:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="extender-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
