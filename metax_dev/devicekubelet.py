"""A test kubelet: the device manager's side of the device plugin protocol, over real gRPC on unix sockets.

It behaves as kubelet's devicemanager does where the plugin can tell the difference:
- on start it deletes every socket in the device-plugin directory (stale plugin sockets), then listens on
  ``kubelet.sock`` and serves ``v1beta1.Registration``;
- Register checks the API version and the extended resource name, dials the plugin's endpoint *inside*
  the call, asks GetDevicePluginOptions, then consumes ListAndWatch in the background;
- on stop it closes its connections and removes ``kubelet.sock``.

Tests (and the real-cluster demo, `metax_dev.demo.devices`) read what it saw (`devices`, `registrations`)
and wait for conditions with `wait_for`, polling under a deadline instead of sleeping. It lived in
tests/deviceplugin until the demo needed it; the tests import it from here.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import stat
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import grpc

from metax_k8s.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

T = TypeVar("T")


@attrs.define
class Endpoint:
    resource: str
    channel: grpc.Channel
    stub: Any
    options: api_pb2.DevicePluginOptions
    thread: threading.Thread | None = None
    connected: bool = True


class _Registration(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        return self.kubelet._register(request, context)


class Kubelet:
    def __init__(self, plugin_dir: pathlib.Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.devices: dict[str, dict[str, api_pb2.Device]] = {}
        """Latest ListAndWatch list per resource, by device ID."""
        self.updates: dict[str, list[tuple[float, dict[str, str]]]] = {}
        """Every list received per resource: (monotonic time, {id: health})."""
        self.endpoints: dict[str, Endpoint] = {}
        self.on_list: Callable[[str, dict[str, api_pb2.Device]], None] | None = None
        """Called with every list as it is received, before it is recorded (tests check the host then)."""
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    def start(self, *, wipe_sockets: bool = True) -> Kubelet:
        """Listen on kubelet.sock; first delete every socket in the directory, as kubelet does, unless
        ``wipe_sockets`` is False (to check that a new kubelet.sock alone makes plugins register again)."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        for entry in self.plugin_dir.iterdir() if wipe_sockets else ():
            if stat.S_ISSOCK(os.lstat(entry).st_mode):
                entry.unlink()
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="kubelet"))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)  # type: ignore[no-untyped-call, unused-ignore]
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(0).wait()
        with self._cond:
            endpoints = list(self.endpoints.values())
        for endpoint in endpoints:
            endpoint.channel.close()
            if endpoint.thread is not None:
                endpoint.thread.join(timeout=10)
        self.socket.unlink(missing_ok=True)

    # --- the Registration service -------------------------------------------------------------------------

    def _register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        domain, slash, name = request.resource_name.partition("/")
        if not slash or not name or domain.endswith("kubernetes.io") or "." not in domain:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not an extended resource: {request.resource_name}")
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / request.endpoint}")
        stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call, unused-ignore]
        try:
            options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        except grpc.RpcError as exc:
            channel.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot dial the plugin: {exc}")
        endpoint = Endpoint(request.resource_name, channel, stub, options)
        with self._cond:
            old = self.endpoints.get(request.resource_name)
            self.registrations.append(request)
            self.endpoints[request.resource_name] = endpoint
            self._cond.notify_all()
        if old is not None:
            old.channel.close()
        endpoint.thread = threading.Thread(target=self._watch, args=(endpoint,), daemon=True)
        endpoint.thread.start()
        return api_pb2.Empty()

    def _watch(self, endpoint: Endpoint) -> None:
        try:
            for response in endpoint.stub.ListAndWatch(api_pb2.Empty()):
                listed = {d.ID: d for d in response.devices}
                if self.on_list is not None:
                    self.on_list(endpoint.resource, listed)
                with self._cond:
                    if self.endpoints.get(endpoint.resource) is not endpoint:
                        return
                    self.devices[endpoint.resource] = listed
                    self.updates.setdefault(endpoint.resource, []).append(
                        (time.monotonic(), {i: d.health for i, d in listed.items()})
                    )
                    self._cond.notify_all()
        except grpc.RpcError:
            pass
        finally:
            with self._cond:
                endpoint.connected = False
                self._cond.notify_all()

    # --- what tests use -----------------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
        """Poll ``predicate`` (under the lock, woken by every update) until truthy; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {what}; devices={self.health_view()}, "
                        f"registrations={[r.resource_name for r in self.registrations]}"
                    )
                self._cond.wait(timeout=min(left, 0.05))

    def health_view(self) -> dict[str, dict[str, str]]:
        return {r: {i: d.health for i, d in devs.items()} for r, devs in self.devices.items()}

    def healthy(self, resource: str) -> set[str]:
        return {i for i, d in self.devices.get(resource, {}).items() if d.health == "Healthy"}

    def unhealthy(self, resource: str) -> set[str]:
        return {i for i, d in self.devices.get(resource, {}).items() if d.health == "Unhealthy"}

    def registered(self, resource: str) -> int:
        return sum(1 for r in self.registrations if r.resource_name == resource)

    def connected(self, resource: str) -> bool:
        endpoint = self.endpoints.get(resource)
        return endpoint is not None and endpoint.connected

    def allocate(self, resource: str, *containers: Sequence[str]) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers]
        )
        response: api_pb2.AllocateResponse = self.endpoints[resource].stub.Allocate(request, timeout=5)
        return response

    def preferred(self, resource: str, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available), must_include_deviceIDs=list(must), allocation_size=size
                )
            ]
        )
        response = self.endpoints[resource].stub.GetPreferredAllocation(request, timeout=5)
        return list(response.container_responses[0].deviceIDs)

    def pre_start(self, resource: str, ids: Sequence[str]) -> api_pb2.PreStartContainerResponse:
        request = api_pb2.PreStartContainerRequest(devices_ids=list(ids))
        response: api_pb2.PreStartContainerResponse = self.endpoints[resource].stub.PreStartContainer(
            request, timeout=5
        )
        return response
