"""The runtime's own APIs over its unix socket, encoded by hand: CRI calls (gRPC) and HTTP GETs.

Why a module of its own: `metax_hw.container_runtime` reaches the runtime's binary, daemon and service; this is the
wire it speaks to a running daemon. The CRI messages (``RuntimeService/Status``, ``ListPodSandbox``,
``PodSandboxStatus``) are encoded and decoded by hand, a few fields each, rather than generating the whole CRI API;
`unix_http_get` asks dockerd's API (``GET /info``) and CRI-O's info endpoint (``GET /config``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from metax_core.errors import HardwareError

CRI_STATUS = "/runtime.v1.RuntimeService/Status"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def message_fields(data: bytes) -> list[tuple[int, bytes | int]]:
    """The (field number, value) pairs of a protobuf message (varints and length-delimited fields only)."""
    out: list[tuple[int, bytes | int]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(data, i)
            out.append((number, data[i : i + size]))
            i += size
        else:
            raise ValueError(f"unexpected wire type {wire} for field {number}")
    return out


def status_info(response: bytes) -> dict[str, str]:
    """``StatusResponse.info`` (field 2, map<string, string>) from the encoded response."""
    info: dict[str, str] = {}
    for number, value in message_fields(response):
        if number == 2 and isinstance(value, bytes):
            entry = {n: v for n, v in message_fields(value) if isinstance(v, bytes)}
            info[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
    return info


STATUS_VERBOSE = b"\x08\x01"
"""``StatusRequest{verbose: true}``."""


def cri_status_config(socket: str, timeout: float = 10.0) -> Mapping[str, Any]:
    import grpc

    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            call: Callable[..., bytes] = channel.unary_unary(
                CRI_STATUS, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            response = call(STATUS_VERBOSE, timeout=timeout)
    except grpc.RpcError as exc:
        raise HardwareError("ask the runtime for its CRI status", socket, str(exc.details() or exc.code())) from exc
    config = status_info(response).get("config")
    if config is None:
        raise HardwareError("read the runtime's CRI config", socket, "the CRI status carries no config")
    try:
        loaded = json.loads(config)
    except ValueError as exc:
        raise HardwareError("read the runtime's CRI config", socket, f"not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise HardwareError("read the runtime's CRI config", socket, "not an object")
    return loaded


CRI_LIST_SANDBOXES = "/runtime.v1.RuntimeService/ListPodSandbox"


def sandboxes_with_handler(socket: str, runtime_handler: str, timeout: float = 10.0) -> list[str]:
    """The ids of the pod sandboxes the runtime runs with ``runtime_handler`` (CRI ``ListPodSandbox``:
    ``items`` is field 1, a sandbox's ``id`` field 1 and ``runtime_handler`` field 7)."""
    import grpc

    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            call: Callable[..., bytes] = channel.unary_unary(
                CRI_LIST_SANDBOXES, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            response = call(b"", timeout=timeout)
    except grpc.RpcError as exc:
        raise HardwareError("list the runtime's pod sandboxes", socket, str(exc.details() or exc.code())) from exc
    return [sandbox for sandbox, its_handler in listed_sandboxes(response) if its_handler == runtime_handler]


def listed_sandboxes(response: bytes) -> list[tuple[str, str]]:
    """(id, runtime handler) of each sandbox in a ``ListPodSandboxResponse``."""
    found = []
    for number, item in message_fields(response):
        if number == 1 and isinstance(item, bytes):
            fields = {n: v for n, v in message_fields(item) if isinstance(v, bytes)}
            found.append((fields.get(1, b"").decode(), fields.get(7, b"").decode()))
    return found


CRI_SANDBOX_STATUS = "/runtime.v1.RuntimeService/PodSandboxStatus"
CRIO_HANDLER_ANNOTATION = "io.kubernetes.cri-o.RuntimeHandler"


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def text_field(number: int, value: str) -> bytes:
    """A protobuf string field: e.g. ``{Stop,Remove}PodSandboxRequest{pod_sandbox_id}`` is ``text_field(1, id)``."""
    data = value.encode()
    return _encode_varint(number << 3 | 2) + _encode_varint(len(data)) + data


def _encode_sandbox_status(sandbox: str) -> bytes:
    """``PodSandboxStatusRequest{pod_sandbox_id: sandbox, verbose: true}`` (fields 1 and 2)."""
    return text_field(1, sandbox) + b"\x10\x01"


def crio_sandboxes_with_handler(socket: str, runtime_handler: str, timeout: float = 10.0) -> list[str]:
    """The pod sandboxes CRI-O runs with ``runtime_handler``. CRI-O's ``ListPodSandbox`` leaves
    ``runtime_handler`` empty (cri-o ``internal/lib/sandbox/builder.go``), so each sandbox's verbose
    ``PodSandboxStatus`` is read: its ``info["info"]`` JSON carries the sandbox's OCI spec, whose annotation
    ``io.kubernetes.cri-o.RuntimeHandler`` names the handler."""
    import grpc

    found = []
    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            listing: Callable[..., bytes] = channel.unary_unary(
                CRI_LIST_SANDBOXES, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            status: Callable[..., bytes] = channel.unary_unary(
                CRI_SANDBOX_STATUS, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            for sandbox, _ in listed_sandboxes(listing(b"", timeout=timeout)):
                info = status_info(status(_encode_sandbox_status(sandbox), timeout=timeout)).get("info", "{}")
                try:
                    spec = json.loads(info).get("runtimeSpec") or {}
                except (ValueError, AttributeError):
                    continue
                if (spec.get("annotations") or {}).get(CRIO_HANDLER_ANNOTATION) == runtime_handler:
                    found.append(sandbox)
    except grpc.RpcError as exc:
        raise HardwareError("list the runtime's pod sandboxes", socket, str(exc.details() or exc.code())) from exc
    return found


def unix_http_get(socket_path: str, path: str, timeout: float = 10.0) -> bytes:
    """``GET <path>`` over a unix socket (dockerd's API, CRI-O's info endpoint)."""
    import http.client
    import socket as socket_module

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(socket_path)
            except OSError:
                sock.close()
                raise
            self.sock = sock

    connection = Connection("localhost", timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    except OSError as exc:
        raise HardwareError(f"GET {path}", socket_path, str(exc)) from exc
    finally:
        connection.close()
    if response.status != 200:
        raise HardwareError(f"GET {path}", socket_path, f"HTTP {response.status}: {body[:200]!r}")
    return body
