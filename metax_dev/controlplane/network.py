"""Loopback networking of the test control plane: addresses, free ports, a small HTTP(S) client.

Why this module exists: nothing the control plane starts listens on or dials anything but
127.0.0.1, and this is the one place that says so. Components get free loopback ports below the
ephemeral range; the launcher's own requests (readiness probes, creating kwok nodes) go through a
minimal JSON-over-HTTPS client with the admin credentials, so it needs no Kubernetes client. The
pod and service ranges are bookkeeping only: nothing routes to them (see docs/controlplane.md).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from metax_dev.controlplane import errors, pki

LOOPBACK: Final = "127.0.0.1"

#: Service and pod ranges. They are only bookkeeping in objects: nothing here routes to them.
SERVICE_CLUSTER_IP_RANGE: Final = "10.96.0.0/16"
POD_CIDR: Final = "10.244.0.0/16"

_allocated_ports: set[int] = set()
_ports_lock = threading.Lock()


def free_port() -> int:
    """A free 127.0.0.1 TCP port below the ephemeral range (so clients never grab it)."""
    with _ports_lock:
        for _ in range(500):
            port = random.randint(20000, 32000)
            if port in _allocated_ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((LOOPBACK, port))
                except OSError:
                    continue
            _allocated_ports.add(port)
            return port
    raise errors.ControlPlaneError("no free port on 127.0.0.1 in 20000-32000")


def release_ports(ports: Iterable[int]) -> None:
    """Let :func:`free_port` hand out these ports again (their control plane stopped)."""
    with _ports_lock:
        _allocated_ports.difference_update(ports)


class Https:
    """Minimal JSON-over-HTTPS client for the launcher's own requests (admin credentials)."""

    def __init__(self, port: int, ca: Path, client: pki.KeyPair | None) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca))
        if client is not None:
            self.context.load_cert_chain(str(client.cert), str(client.key))

    def request(self, method: str, path: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
        connection = http.client.HTTPSConnection(LOOPBACK, self.port, context=self.context, timeout=timeout)
        try:
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def ok(self, path: str) -> bool:
        try:
            status, _ = self.request("GET", path, timeout=3.0)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def json(self, method: str, path: str, body: object | None = None) -> Any:
        status, data = self.request(method, path, body)
        if status >= 300:
            raise errors.ControlPlaneError(f"{method} {path}: HTTP {status}: {data[:500]!r}")
        return json.loads(data)


def http_ok(port: int, path: str) -> bool:
    """Whether plain HTTP ``GET path`` on a loopback port answers 200 (etcd's /health)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=3.0)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
