"""The three CRI calls the 1.6 test makes through the ``metax`` handler (RunPodSandbox, StopPodSandbox,
RemovePodSandbox), their messages encoded by hand like `metax_hw.container_runtime` does for Status: the
fields used are few (runtime.v1 api.proto: RunPodSandboxRequest.config = 1, .runtime_handler = 2;
PodSandboxConfig.metadata = 1, .log_directory = 3, .linux = 8; PodSandboxMetadata.name = 1,
.uid = 2, .namespace = 3; LinuxPodSandboxConfig.cgroup_parent = 1, .security_context = 2;
LinuxSandboxSecurityContext.namespace_options = 1; NamespaceOption.network = 1, NODE = 2)."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from metax_hw import container_runtime

SERVICE = "/runtime.v1.RuntimeService/"
NODE = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _text(number: int, text: str) -> bytes:
    return _bytes(number, text.encode())


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _call(socket: str, method: str, request: bytes) -> bytes:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        call: Callable[..., bytes] = channel.unary_unary(
            SERVICE + method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        return call(request, timeout=60)


def run_pod_sandbox(socket: str, name: str, *, handler: str, log_dir: str, cgroup_parent: str) -> str:
    metadata = _text(1, name) + _text(2, f"uid-{name}") + _text(3, "metax-runtime-test")
    security = _bytes(1, _int(1, NODE))  # the node's network: no CNI needed
    linux = _text(1, cgroup_parent) + _bytes(2, security)
    config = _bytes(1, metadata) + _text(3, log_dir) + _bytes(8, linux)  # no hostname: the node's UTS
    response = _call(socket, "RunPodSandbox", _bytes(1, config) + _text(2, handler))
    fields = dict(container_runtime._fields(response))
    sandbox = fields.get(1)
    assert isinstance(sandbox, bytes)
    return sandbox.decode()


def remove_pod_sandbox(socket: str, sandbox: str) -> None:
    _call(socket, "StopPodSandbox", _text(1, sandbox))
    _call(socket, "RemovePodSandbox", _text(1, sandbox))
