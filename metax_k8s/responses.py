"""Reading the API server's answers: an error body as a `ClusterError`, a watch stream as `WatchEvent`s.

Why a module of its own: `metax_k8s.client.HttpApi` says what to ask (one method per verb); what comes back
is decoded here, straight from the bytes: a Status body's message and a ``Retry-After`` header become the
error `retry` classifies (retryable or not), and a watch's stream of JSON lines becomes events, an ``ERROR``
event the same error a request would raise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import urllib3

from metax_core.errors import ClusterError
from metax_core.ports.cluster import Fields, WatchEvent, WatchEventType
from metax_k8s import decoding, retry


def error(response: urllib3.BaseHTTPResponse, verb: str, what: str) -> ClusterError:
    try:
        raw = response.read()
    except urllib3.exceptions.HTTPError:
        raw = b""
    finally:
        response.release_conn()
    detail = raw.decode(errors="replace").strip() or response.reason or "no message"
    try:
        status_body = json.loads(raw)
        if isinstance(status_body, dict) and status_body.get("message"):
            detail = str(status_body["message"])
    except ValueError:
        pass
    retry_after: float | None = None
    header = response.headers.get("Retry-After")
    if header and header.strip().isdigit():
        retry_after = float(header.strip())
    return retry.error_for(verb, what, response.status, detail, retry_after)


def watch_events(response: urllib3.BaseHTTPResponse, what: str, fields: Fields | None = None) -> Iterator[WatchEvent]:
    """One event per line of the stream, decoded straight from the bytes (no model objects; with ``fields``, only
    those of each object, `decoding.event`).

    The pieces of a line are joined once, when its newline arrives: appending chunks to one growing
    buffer and splitting it would copy the rest of the buffer for every line (quadratic in the chunk),
    and leave the allocator with many short-lived large blocks of every size.
    """
    pieces: list[bytes] = []
    try:
        for chunk in response.stream(64 * 1024, decode_content=True):
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                pieces.append(chunk[start:end])
                line = b"".join(pieces)
                pieces.clear()
                start = end + 1
                if line.strip():
                    yield _event(line, what, fields)
            if start < len(chunk):
                pieces.append(chunk[start:])  # a line cut short by the end of the stream is dropped
    except urllib3.exceptions.HTTPError as exc:
        raise retry.Unavailable("watch", what, f"watch stream broken: {exc}") from exc
    finally:
        response.release_conn()


def _event(line: bytes, what: str, fields: Fields | None = None) -> WatchEvent:
    event = decoding.event(line, fields)
    obj = event.get("object") or {}
    if event.get("type") == "ERROR":
        code = int(obj.get("code") or 500)
        raise retry.error_for("watch", what, code, str(obj.get("message", "watch error")))
    return WatchEvent(type=WatchEventType(event["type"]), object=obj)
