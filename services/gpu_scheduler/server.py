"""The extender's HTTP endpoints: ``POST /filter``, ``POST /prioritize`` (kube-scheduler's extender protocol,
`metax_core.topology.extender`), ``GET /healthz`` (ready once both caches listed), ``GET /metrics`` (its answers
counted, Prometheus text: how an administrator sees that the scheduler really consults it)."""

from __future__ import annotations

import http.server
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import prometheus_client

from metax_core.errors import InvalidSpec
from metax_core.topology import extender
from services.gpu_scheduler import cache

log = logging.getLogger(__name__)


class Metrics:
    """The extender's own series, in a registry of its own (one per server: tests run several in a process)."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            extender.REQUESTS_METRIC,
            "Extender requests answered, by verb and outcome.",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.filtered_out = prometheus_client.Counter(
            extender.FILTERED_OUT_METRIC, "Nodes the filter verb turned away.", registry=self.registry
        )
        self.duration = prometheus_client.Histogram(
            extender.DURATION_METRIC,
            "Seconds from an extender request read to its answer.",
            ["verb"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )


def _pod_name(pod: Any) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


LOGGED_REASONS = 5
"""Nodes turned away named in a filter's log line (a 5,000-node cluster would otherwise log 5,000 per pod)."""


def _turned_away(failed: Mapping[str, str]) -> str:
    named = sorted(failed.items())[:LOGGED_REASONS]
    text = "".join(f"; {node}: {why}" for node, why in named)
    more = len(failed) - len(named)
    return text + (f"; and {more} more" if more else "")


def handler(state: cache.Cache, metrics: Metrics) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _answer(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == extender.METRICS_PATH:
                self._answer(
                    200, prometheus_client.generate_latest(metrics.registry), prometheus_client.CONTENT_TYPE_LATEST
                )
            elif self.path != "/healthz":
                self._answer(404, b'{"error": "not found"}')
            elif all(e.is_set() for e in state.synced.values()):
                self._answer(200, b'{"status": "ok"}')
            else:
                self._answer(503, b'{"status": "cache not synced"}')

        def do_POST(self) -> None:
            started = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            verb = {extender.FILTER_PATH: "filter", extender.PRIORITIZE_PATH: "prioritize"}.get(self.path)
            if verb is None:
                self._answer(404, b'{"error": "not found"}')
                return
            try:
                args = extender.parse_args(body)
            except InvalidSpec as exc:
                log.warning("%s: refused a request: %s", verb, exc)
                metrics.requests.labels(verb, "refused").inc()
                self._answer(400, extender.render_filter(extender.Verdict((), {}), error=str(exc)))
                return
            n = extender.gpus_requested(args.pod)
            facts, used = state.snapshot()
            if verb == "filter":
                verdict = extender.filter_nodes(n, args.node_names, facts, used)
                metrics.filtered_out.inc(len(verdict.failed))
                log.info(
                    "filter %s (%d GPUs): %d of %d nodes fit%s",
                    _pod_name(args.pod),
                    n,
                    len(verdict.passed),
                    len(args.node_names),
                    _turned_away(verdict.failed),
                )
                answer = extender.render_filter(verdict)
            else:
                ranked = extender.prioritize(n, args.node_names, facts)
                log.info("prioritize %s (%d GPUs): %s", _pod_name(args.pod), n, dict(ranked))
                answer = extender.render_priorities(ranked)
            self._answer(200, answer)
            metrics.requests.labels(verb, "answered").inc()
            metrics.duration.labels(verb).observe(time.perf_counter() - started)

    return Handler


class Server:
    """The extender on ``host:port`` (port 0: any free one), served from its own thread."""

    def __init__(self, state: cache.Cache, host: str = "0.0.0.0", port: int = extender.PORT) -> None:
        self.metrics = Metrics()
        self.httpd = http.server.ThreadingHTTPServer((host, port), handler(state, self.metrics))
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
