"""The CRI calls the runtime tests make (RunPodSandbox, CreateContainer, StartContainer, ContainerStatus, and the
stops and removals), their messages encoded by hand like `metax_hw.container_runtime` does for Status: the fields
used are few (runtime.v1 api.proto):

* RunPodSandboxRequest: config = 1, runtime_handler = 2; PodSandboxConfig: metadata = 1, log_directory = 3,
  linux = 8; PodSandboxMetadata: name = 1, uid = 2, namespace = 3; LinuxPodSandboxConfig: cgroup_parent = 1,
  security_context = 2; LinuxSandboxSecurityContext: namespace_options = 1; NamespaceOption: network = 1, pid = 2
  (POD = 0, CONTAINER = 1, NODE = 2);
* CreateContainerRequest: pod_sandbox_id = 1, config = 2, sandbox_config = 3; ContainerConfig: metadata = 1
  (ContainerMetadata: name = 1), image = 2 (ImageSpec: image = 1, user_specified_image = 18, which CRI-O
  requires), command = 3, envs = 6 (KeyValue: key = 1,
  value = 2), devices = 8 (Device: container_path = 1, host_path = 2, permissions = 3), log_path = 11, linux =
  15 (LinuxContainerConfig: security_context = 2; LinuxContainerSecurityContext: namespace_options = 3),
  CDI_devices = 17 (CDIDevice: name = 1) — what the kubelet sends for a container whose device plugin answered
  Allocate with environment, device nodes and CDI device names;
* StartContainer, StopContainer (container_id = 1, timeout = 2), RemoveContainer: container_id = 1;
  ContainerStatusRequest: container_id = 1 → ContainerStatusResponse.status = 1 (ContainerStatus: state = 3,
  exit_code = 7, reason = 10, message = 11; ContainerState EXITED = 2).
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping, Sequence

import attrs
import grpc

from metax_hw import cri_calls

SERVICE = "/runtime.v1.RuntimeService/"
CONTAINER = 1
NODE = 2
RUNNING = 1
EXITED = 2


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


def _first_text(response: bytes, number: int = 1) -> str:
    fields = dict(cri_calls.message_fields(response))
    value = fields.get(number)
    assert isinstance(value, bytes), f"field {number} missing in {response!r}"
    return value.decode()


def sandbox_config(name: str, *, log_dir: str, cgroup_parent: str, pid: int | None = None) -> bytes:
    """A PodSandboxConfig on the node's network (no CNI needed) and UTS (no hostname); ``pid``: its PID namespace
    mode (the kubelet sends CONTAINER for a pod that does not share its process namespace; unset: POD)."""
    metadata = _text(1, name) + _text(2, f"uid-{name}") + _text(3, "metax-runtime-test")
    security = _bytes(1, _int(1, NODE) + (_int(2, pid) if pid is not None else b""))
    linux = _text(1, cgroup_parent) + _bytes(2, security)
    return _bytes(1, metadata) + _text(3, log_dir) + _bytes(8, linux)


def run_pod_sandbox(
    socket: str, name: str, *, handler: str, log_dir: str, cgroup_parent: str, pid: int | None = None
) -> str:
    config = sandbox_config(name, log_dir=log_dir, cgroup_parent=cgroup_parent, pid=pid)
    return _first_text(_call(socket, "RunPodSandbox", _bytes(1, config) + _text(2, handler)))


def remove_pod_sandbox(socket: str, sandbox: str) -> None:
    _call(socket, "StopPodSandbox", _text(1, sandbox))
    _call(socket, "RemovePodSandbox", _text(1, sandbox))


@attrs.frozen
class Device:
    container_path: str
    host_path: str
    permissions: str = "rw"


def create_container(
    socket: str,
    sandbox: str,
    config: bytes,
    name: str,
    *,
    image: str,
    command: Sequence[str],
    envs: Mapping[str, str] = {},
    devices: Sequence[Device] = (),
    cdi_devices: Sequence[str] = (),
    pid: int | None = None,
) -> str:
    """CreateContainer in ``sandbox`` (whose ``config`` is `sandbox_config`'s); its log is ``<log_dir>/<name>.log``;
    ``pid``: its PID namespace mode, the pod's (the kubelet sends both)."""
    body = _bytes(1, _text(1, name)) + _bytes(2, _text(1, image) + _text(18, image))
    body += b"".join(_text(3, part) for part in command)
    body += b"".join(_bytes(6, _text(1, key) + _text(2, value)) for key, value in envs.items())
    body += b"".join(
        _bytes(8, _text(1, d.container_path) + _text(2, d.host_path) + _text(3, d.permissions)) for d in devices
    )
    body += _text(11, f"{name}.log")
    if pid is not None:
        body += _bytes(15, _bytes(2, _bytes(3, _int(1, NODE) + _int(2, pid))))
    body += b"".join(_bytes(17, _text(1, device)) for device in cdi_devices)
    return _first_text(_call(socket, "CreateContainer", _text(1, sandbox) + _bytes(2, body) + _bytes(3, config)))


def start_container(socket: str, container: str) -> None:
    _call(socket, "StartContainer", _text(1, container))


@attrs.frozen
class Status:
    state: int
    exit_code: int
    reason: str
    message: str


def container_status(socket: str, container: str) -> Status:
    response = _call(socket, "ContainerStatus", _text(1, container))
    status = dict(cri_calls.message_fields(response)).get(1)
    assert isinstance(status, bytes)
    fields = dict(cri_calls.message_fields(status))

    def text(number: int) -> str:
        value = fields.get(number, b"")
        return value.decode() if isinstance(value, bytes) else ""

    state, code = fields.get(3, 0), fields.get(7, 0)
    assert isinstance(state, int) and isinstance(code, int)
    return Status(state, code - (1 << 64) if code >= 1 << 63 else code, text(10), text(11))


def wait_exited(socket: str, container: str, timeout: float = 60) -> Status:
    deadline = time.monotonic() + timeout
    while True:
        status = container_status(socket, container)
        if status.state == EXITED:
            return status
        assert time.monotonic() < deadline, f"container {container} did not exit: {status}"
        time.sleep(0.1)


def remove_container(socket: str, container: str) -> None:
    _call(socket, "StopContainer", _text(1, container) + _int(2, 10))
    _call(socket, "RemoveContainer", _text(1, container))


def log_lines(path: pathlib.Path) -> list[str]:
    """A container's output lines from its CRI log file (``<time> <stream> <F|P> <text>`` per line)."""
    return [line.split(" ", 3)[3] if line.count(" ") >= 3 else "" for line in path.read_text().splitlines()]
