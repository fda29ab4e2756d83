"""The shared HTTP endpoints (services._agent.endpoints), over a real loopback socket:

- /healthz answers while the server runs; /readyz says 503 with the reason until the component works, then 200;
- /metrics is Prometheus text that the real parser reads, with the component's own metrics in it;
- a component's own route answers GET and POST (with its body); an unknown path is 404 naming what is served;
- a route that raises is a 500 with its reason and the server keeps serving; a body over the limit is 413;
- after stop the port is closed.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services._agent import endpoints


def get(port: int, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.fixture
def served() -> Iterator[tuple[endpoints.Endpoints, dict[str, object]]]:
    registry = prometheus_client.CollectorRegistry()
    gauge = prometheus_client.Gauge("mx_gpu_usage", "GPU utilisation (percent)", ["gpu"], registry=registry)
    gauge.labels(gpu="0").set(42)
    state: dict[str, object] = {"ready": (False, "waiting for the driver")}

    def boom(_: endpoints.Request) -> endpoints.Response:
        raise RuntimeError("topology not read yet")

    server = endpoints.Endpoints(
        "127.0.0.1",
        0,
        ready=lambda: state["ready"],  # type: ignore[return-value]
        registry=registry,
        routes={
            "/echo": lambda r: endpoints.Response.text(200, f"{r.method} {r.body.decode()}"),
            "/boom": boom,
        },
    ).start()
    try:
        yield server, state
    finally:
        server.stop()


def test_health_readiness_and_metrics(served: tuple[endpoints.Endpoints, dict[str, object]]) -> None:
    server, state = served
    assert get(server.port, "/healthz") == (200, "ok\n")
    assert get(server.port, "/readyz") == (503, "waiting for the driver\n")
    state["ready"] = (True, "")
    assert get(server.port, "/readyz") == (200, "ready\n")
    status, text = get(server.port, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [sample] = families["mx_gpu_usage"].samples
    assert (sample.labels, sample.value) == ({"gpu": "0"}, 42.0)


def test_routes_errors_and_limits(served: tuple[endpoints.Endpoints, dict[str, object]]) -> None:
    server, _ = served
    assert get(server.port, "/echo", "POST", b'{"pod": "p"}') == (200, 'POST {"pod": "p"}\n')
    assert get(server.port, "/echo?x=1") == (200, "GET \n")
    status, text = get(server.port, "/nope")
    assert status == 404 and "/healthz" in text and "/echo" in text
    assert get(server.port, "/boom") == (500, "/boom failed: topology not read yet\n")
    assert get(server.port, "/healthz") == (200, "ok\n")  # still serving
    # a body announced over the limit is refused before it is read (sent: the headers alone)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {endpoints.MAX_BODY + 1}\r\n\r\n".encode())
        assert raw.recv(4096).split(b"\r\n", 1)[0] == b"HTTP/1.0 413 Request Entity Too Large"


def test_stop_closes_the_port() -> None:
    server = endpoints.Endpoints("127.0.0.1", 0, ready=lambda: (True, "")).start()
    port = server.port
    assert get(port, "/healthz")[0] == 200
    server.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
