"""One kubelet device plugin: a gRPC server on a unix socket for one extended resource, and its registration.

kubelet wants one socket and one registration per resource, so gpu-device runs one `PluginServer` per
`metax_core.node.devices.Resource`. The server knows the protocol only: the device list is pushed in with
`update`, and Allocate / GetPreferredAllocation are answered by a `ports.node.AllocationBackend` (the service,
which asks the core). Protocol facts this code relies on (kubelet's devicemanager):

- kubelet dials the plugin *inside* Register (GetDevicePluginOptions, then ListAndWatch), so the server
  must be serving before `register` is called;
- a restarted kubelet first deletes every socket in the device-plugin directory, then creates a new
  ``kubelet.sock``: plugins must restart their server and register again;
- ListAndWatch sends the whole list on every change; a device's health is ``Healthy`` or ``Unhealthy``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import pathlib
import stat
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from metax_core.errors import PortError
from metax_core.node import devices
from metax_core.ports import node as node_ports
from metax_core.wire import host
from metax_k8s.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = host.DEVICE_PLUGINS_DIR
ENCODED_KEPT = 1024
"""Encoded Allocate answers a plugin server keeps (`PluginServer.encoded`)."""


class RegistrationFailed(PortError):
    """kubelet refused the registration or could not be reached."""

    def __init__(self, resource: str, detail: str) -> None:
        self.resource = resource
        self.detail = detail
        super().__init__(f"registering {resource} with kubelet failed: {detail}")


class ServeFailed(PortError):
    """The plugin's gRPC server could not listen on its socket."""


def to_proto_device(device: devices.Device) -> api_pb2.Device:
    numa = device.function.numa_node
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)]) if numa is not None else None
    return api_pb2.Device(ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY, topology=topology)


def to_proto_allocation(allocation: devices.ContainerAllocation) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=dict(allocation.envs),
        devices=[
            api_pb2.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in allocation.devices
        ],
        cdi_devices=[api_pb2.CDIDevice(name=n) for n in allocation.cdi_devices],
    )


class _Servicer(api_pb2_grpc.DevicePluginServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, plugin: PluginServer) -> None:
        self._plugin = plugin

    def GetDevicePluginOptions(self, request: api_pb2.Empty, context: Any) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api_pb2.Empty, context: Any) -> Iterator[api_pb2.ListAndWatchResponse]:
        return self._plugin._stream(context)

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        resource = self._plugin.resource
        answers = [
            api_pb2.ContainerPreferredAllocationResponse(
                deviceIDs=list(
                    self._plugin.backend.preferred(
                        resource, list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size
                    )
                )
            )
            for r in request.container_requests
        ]
        return api_pb2.PreferredAllocationResponse(container_responses=answers)

    def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        response = api_pb2.AllocateResponse()
        for r in request.container_requests:
            try:
                allocation = self._plugin.backend.allocate(self._plugin.resource, list(r.devices_ids))
            except devices.AllocationRefused as exc:
                log.warning("refused allocation: %s", exc)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            response.container_responses.add().MergeFromString(self._plugin.encoded(allocation))
        return response

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


class PluginServer:
    """Serves one resource on ``<plugin_dir>/<resource socket name>`` and registers it with kubelet."""

    def __init__(
        self, resource: devices.Resource, plugin_dir: pathlib.Path, backend: node_ports.AllocationBackend
    ) -> None:
        self.resource = resource
        self.backend = backend
        self.plugin_dir = plugin_dir
        self.socket_path = plugin_dir / resource.socket_name
        self._cond = threading.Condition()
        self._devices: tuple[api_pb2.Device, ...] = ()
        self._generation = 0
        self._server: grpc.Server | None = None
        self._socket: tuple[int, int] | None = None
        self._encoded: dict[int, tuple[devices.ContainerAllocation, bytes]] = {}
        """id(allocation) → (the allocation, kept alive so its id stays its own; its encoded response)."""

    # --- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket (replacing a stale one) and serve; idempotent restarts call `stop` first."""
        self.stop()
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"dp-{self.resource.name}")
        )
        api_pb2_grpc.add_DevicePluginServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call, unused-ignore]
        try:
            port = server.add_insecure_port(f"unix://{self.socket_path}")
        except RuntimeError as exc:
            raise ServeFailed(f"cannot listen on {self.socket_path}: {exc}") from exc
        if port == 0:
            raise ServeFailed(f"cannot listen on {self.socket_path}")
        server.start()
        self._server = server
        self._socket = socket_fingerprint(self.socket_path)
        log.info("serving %s on %s", self.resource.value, self.socket_path)

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving: end every ListAndWatch stream, then remove our socket (not somebody else's)."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._cond.notify_all()  # streams send what is pending, then end
        server.stop(grace).wait()
        if self._socket is not None and socket_fingerprint(self.socket_path) == self._socket:
            self.socket_path.unlink(missing_ok=True)
        self._socket = None
        log.info("stopped serving %s", self.resource.value)

    def serving(self) -> bool:
        """True while our server runs and our socket file is still in place (kubelet deletes it on restart)."""
        return (
            self._server is not None
            and self._socket is not None
            and socket_fingerprint(self.socket_path) == self._socket
        )

    def probe(self, timeout: float = 2.0) -> bool:
        """Dial our own socket and call GetDevicePluginOptions: catches a server that runs but does not answer."""
        if not self.serving():
            return False
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call, unused-ignore]
                stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=timeout)
        except grpc.RpcError as exc:
            log.warning("%s plugin does not answer on its socket: %s", self.resource.value, exc)
            return False
        return True

    def register(self, timeout: float = 10.0) -> None:
        """Register with kubelet (which then dials us back); raise RegistrationFailed when refused."""
        kubelet = self.plugin_dir / KUBELET_SOCKET
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_path.name,
            resource_name=self.resource.value,
            options=api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
        )
        try:
            with grpc.insecure_channel(f"unix://{kubelet}") as channel:
                stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call, unused-ignore]
                stub.Register(request, timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as exc:
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            raise RegistrationFailed(self.resource.value, str(detail)) from exc
        log.info("registered %s with kubelet at %s", self.resource.value, kubelet)

    def encoded(self, allocation: devices.ContainerAllocation) -> bytes:
        """The serialized ``ContainerAllocateResponse`` of ``allocation``, built once per allocation object:
        the backend hands out the same object for the same answer while its plan holds (P5), so building
        the message is off Allocate's path. At most `ENCODED_KEPT` are kept (then the memo starts over)."""
        hit = self._encoded.get(id(allocation))
        if hit is not None and hit[0] is allocation:
            return hit[1]
        data: bytes = to_proto_allocation(allocation).SerializeToString()
        if len(self._encoded) >= ENCODED_KEPT:
            self._encoded = {}
        self._encoded[id(allocation)] = (allocation, data)
        return data

    # --- devices ------------------------------------------------------------------------------------------

    def update(self, advertised: Sequence[devices.Device]) -> bool:
        """Set the advertised devices; every open ListAndWatch stream sends them at once. True if changed."""
        new = tuple(to_proto_device(d) for d in advertised)
        with self._cond:
            if new == self._devices:
                return False
            self._devices = new
            self._generation += 1
            self._cond.notify_all()
        return True

    def _stream(self, context: Any) -> Iterator[api_pb2.ListAndWatchResponse]:
        def wake() -> None:
            with self._cond:
                self._cond.notify_all()

        context.add_callback(wake)
        server = self._server
        sent = -1
        while True:
            with self._cond:
                while sent == self._generation and context.is_active() and self._server is server is not None:
                    self._cond.wait(timeout=5.0)
                if not context.is_active() or sent == self._generation:
                    return  # kubelet hung up, or we are stopping with nothing left to send
                sent, current = self._generation, self._devices
            yield api_pb2.ListAndWatchResponse(devices=list(current))


def socket_fingerprint(path: pathlib.Path) -> tuple[int, int] | None:
    """(inode, ctime) of a socket, None when absent: tells a re-created socket (a new kubelet's
    kubelet.sock, or our own socket replaced) from the same one, even when the inode number is reused."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None
