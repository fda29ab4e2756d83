"""The webhook's HTTPS server: admission reviews, health endpoints, and certificates that renew themselves.

Why it exists: the API server calls ``POST /validate/clusteroperator`` and ``POST /validate/driver-config``
(answers: `metax_k8s.admission`), the kubelet probes ``GET /healthz`` (the process serves) and ``GET /readyz``
(a certificate is loaded and the webhook configuration trusts it). `serve` is what the operator process
calls at start (and the ``metax-operator-webhook`` entry point, for running the webhook alone); it returns
a running `WebhookServer` whose background thread re-checks the Secret every ``check_interval`` seconds:
renews what is due (`certs.renew`), reloads what another replica renewed, and re-patches ``caBundle``.

Requests are handled on their own threads; the TLS handshake happens there too, so a slow client never holds
up the accept loop. Request bodies are limited to `MAX_BODY` bytes.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from metax_core.node import labels
from metax_core.wire import agent_env, operator_env
from metax_k8s import admission
from metax_k8s.api import Api
from services._agent import settings as env_settings
from services._agent.settings import env
from services.webhook import certs, store

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
"""The API server's own request limit; an AdmissionReview of a ClusterOperator is far smaller."""


@attrs.frozen
class Settings:
    """Where the webhook listens and what it is called in the cluster."""

    namespace: str = attrs.field(default="metax-operator", metadata=env(agent_env.NAMESPACE))
    name: str = attrs.field(default="metax-operator-webhook", metadata=env("METAX_WEBHOOK_NAME"))
    """The Service, the Secret and the ValidatingWebhookConfiguration share this name."""
    host: str = attrs.field(default="0.0.0.0", metadata=env("METAX_WEBHOOK_HOST"))
    port: env_settings.PositiveInt = attrs.field(
        default=env_settings.PositiveInt(9443), metadata=env(operator_env.WEBHOOK_PORT)
    )
    """0: any free port (tests; the environment allows >= 1 only)."""
    cert_days: env_settings.PositiveInt = attrs.field(
        default=env_settings.PositiveInt(365), metadata=env("METAX_WEBHOOK_CERT_DAYS")
    )
    extra_hosts: env_settings.Names = attrs.field(
        default=env_settings.Names(()), metadata=env("METAX_WEBHOOK_EXTRA_HOSTS")
    )
    """More names or IPs for the serving certificate (e.g. 127.0.0.1 when the API server calls a URL)."""
    check_interval: float = 600.0
    """Seconds between certificate checks."""

    def hosts(self) -> list[str]:
        service = f"{self.name}.{self.namespace}.svc"
        return [service, f"{self.name}.{self.namespace}", f"{service}.cluster.local", *self.extra_hosts]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class WebhookServer:
    """A running webhook: `port`, `ready`, `check` (renew now if due), `shutdown`."""

    def __init__(self, settings: Settings, api: Api, clock: Callable[[], dt.datetime] = _utc_now) -> None:
        self.settings = settings
        self.api = api
        self.clock = clock
        self.material: certs.Material | None = None
        self.ca_trusted = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._dir = Path(tempfile.mkdtemp(prefix="metax-webhook-"))
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._httpd = _HttpServer((settings.host, settings.port), _Handler, self)
        self._threads: list[threading.Thread] = []

    def flashing_nodes(self) -> list[str]:
        """The nodes driver-manager labelled while it flashes firmware (R-FW's edit lock; one list by label)."""
        selector = f"{labels.FIRMWARE_FLASHING}={labels.TRUE}"
        return sorted(str(n["metadata"]["name"]) for n in self.api.list("v1", "Node", label_selector=selector).items)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def ready(self) -> bool:
        return self.material is not None and self.ca_trusted

    def _load(self, material: certs.Material) -> None:
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(material.serving.key)
        cert.write_bytes(material.serving.cert)
        # New connections use the new chain; established ones finish with the old one.
        self._context.load_cert_chain(cert, key)
        self.material = material

    def check(self, *, force: bool = False, force_ca: bool = False) -> None:
        """Renew what is due (or forced), load what the Secret holds, make the configuration trust it."""
        with self._lock:
            now = self.clock()
            hosts = self.settings.hosts()
            for _ in range(3):
                stored, version = store.read(self.api, self.settings.namespace, self.settings.name)
                renewed = certs.renew(
                    stored, hosts, now, dt.timedelta(days=self.settings.cert_days), force=force, force_ca=force_ca
                )
                if renewed is None:
                    assert stored is not None
                    break
                if store.write(self.api, self.settings.namespace, self.settings.name, renewed, version):
                    log.info(
                        "webhook certificate issued, valid until %s", renewed.serving.certificate.not_valid_after_utc
                    )
                    stored = renewed
                    break
                force = force_ca = False  # another replica renewed meanwhile: take theirs
            else:
                raise RuntimeError("could not store the webhook certificate (conflicting writers)")
            if self.material != stored:
                self._load(stored)
            self.ca_trusted = store.patch_ca_bundle(self.api, self.settings.name, stored.ca_bundle(now))
            if not self.ca_trusted:
                log.info("ValidatingWebhookConfiguration %s not found (yet); will retry", self.settings.name)

    def _watch_certificates(self) -> None:
        interval = self.settings.check_interval
        while not self._stop.wait(interval if self.ready else min(interval, 5.0)):
            try:
                self.check()
            except Exception:
                log.exception("webhook certificate check failed")

    def start(self) -> WebhookServer:
        self.check()
        for target, name in ((self._httpd.serve_forever, "serve"), (self._watch_certificates, "certificates")):
            thread = threading.Thread(target=target, name=f"webhook-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("webhook serving on port %d", self.port)
        return self

    def shutdown(self) -> None:
        """Stop serving and checking; safe to call more than once."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._threads:  # shutdown() waits for serve_forever, which only runs once started
            self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


class _HttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], webhook: WebhookServer) -> None:
        self.webhook = webhook
        super().__init__(address, handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        # The handshake runs on the request's thread (first read), not in the accept loop.
        return self.webhook._context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready = self.server.webhook.ready
            self._send(200 if ready else 503, b"ok\n" if ready else b"certificate not trusted yet\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY:
            self._send(413 if length > MAX_BODY else 400, b'{"error": "body missing or too large"}')
            return
        try:
            body = json.loads(self.rfile.read(length))
            answer = admission.review(body, path, self.server.webhook.flashing_nodes)
        except (ValueError, UnicodeDecodeError) as exc:
            self._send(404 if "no admission rules" in str(exc) else 400, json.dumps({"error": str(exc)}).encode())
            return
        self._send(200, json.dumps(answer).encode())


def serve(settings: Settings, api: Api, clock: Callable[[], dt.datetime] = _utc_now) -> WebhookServer:
    """Start the webhook: certificates checked (issued if needed) and trusted, then serving in the background."""
    return WebhookServer(settings, api, clock).start()


def settings_from_env(environ: Mapping[str, str]) -> Settings:
    """Settings from the environment (the agents' converter); InvalidSpec names every bad variable at once."""
    return env_settings.load(Settings, {k: v for k, v in environ.items() if v != ""})
