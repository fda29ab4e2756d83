"""A small client of the kubelet's PodResources API: List, Get and GetAllocatableResources as records.

Why this module exists: the gRPC messages are generated code with protobuf types; callers want frozen
records in domain words (pod, container, resource, device IDs, NUMA nodes), and one error type
(``PortError``) whatever went wrong on the socket.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs
import grpc

from metax_core.errors import PortError
from metax_core.wire.meta import PREFIX
from metax_k8s.podresources.v1 import api_pb2, api_pb2_grpc

#: Where the kubelet serves the API, relative to its ``--root-dir`` (default ``/var/lib/kubelet``).
SOCKET: Final = "pod-resources/kubelet.sock"
DEFAULT_SOCKET: Final = pathlib.Path("/var/lib/kubelet") / SOCKET


@attrs.frozen
class Devices:
    """Devices of one extended resource given to a container (or allocatable on the node)."""

    resource: str
    ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@attrs.frozen
class ContainerResources:
    name: str
    devices: tuple[Devices, ...]

    def device_ids(self, resource: str) -> tuple[str, ...]:
        return tuple(i for d in self.devices if d.resource == resource for i in d.ids)


@attrs.frozen
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...]

    def device_ids(self, resource: str) -> tuple[str, ...]:
        """Every device of ``resource`` held by any container of the pod, in kubelet's order."""
        return tuple(i for c in self.containers for i in c.device_ids(resource))


def _devices(items: Iterable[Any]) -> tuple[Devices, ...]:
    return tuple(
        Devices(
            resource=d.resource_name,
            ids=tuple(d.device_ids),
            numa_nodes=tuple(n.ID for n in d.topology.nodes) if d.HasField("topology") else (),
        )
        for d in items
    )


def _pod(message: Any) -> PodResources:
    return PodResources(
        namespace=message.namespace,
        name=message.name,
        containers=tuple(ContainerResources(c.name, _devices(c.devices)) for c in message.containers),
    )


class PodResourcesClient:
    """Reads the PodResources API on ``socket``; use as a context manager or call :meth:`close`."""

    def __init__(self, socket: pathlib.Path = DEFAULT_SOCKET, *, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket}")
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call, unused-ignore]

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, operation: str, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            detail = f"{exc.code().name}: {exc.details()}" if hasattr(exc, "code") else str(exc)
            raise PortError(f"kubelet PodResources {operation} on {self.socket} failed: {detail}") from exc

    def list(self) -> list[PodResources]:
        """Every pod the kubelet knows, with the devices of each container."""
        response = self._call("List", self._stub.List, api_pb2.ListPodResourcesRequest())
        return [_pod(p) for p in response.pod_resources]

    def get(self, namespace: str, name: str) -> PodResources:
        """One pod (the kubelet's ``KubeletPodResourcesGet`` feature, on by default since 1.34)."""
        request = api_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        return _pod(self._call("Get", self._stub.Get, request).pod_resources)

    def allocatable(self) -> tuple[Devices, ...]:
        """Every device the kubelet may hand out, by resource."""
        response = self._call(
            "GetAllocatableResources", self._stub.GetAllocatableResources, api_pb2.AllocatableResourcesRequest()
        )
        return _devices(response.devices)


def _held(socket: pathlib.Path, timeout: float) -> Iterator[tuple[PodResources, Devices]]:
    """Every (pod, devices of one resource) a container holds now; PortError when the kubelet does not answer."""
    with PodResourcesClient(socket, timeout=timeout) as api:
        pods = api.list()
    for pod in pods:
        for container in pod.containers:
            for listed in container.devices:
                yield pod, listed


def held_devices(socket: pathlib.Path, *, timeout: float = 2.0) -> dict[str, list[str]]:
    """Resource name → the device IDs pods hold now (every container's), from the kubelet's PodResources API
    (read-only socket, 000 §1.3.2); PortError when the kubelet does not answer."""
    found: dict[str, list[str]] = {}
    for _, listed in _held(socket, timeout):
        found.setdefault(listed.resource, []).extend(listed.ids)
    return found


def device_holders(socket: pathlib.Path, *, timeout: float = 2.0) -> dict[str, list[str]]:
    """Device ID → the pods (``namespace/name``) whose containers hold it now, for the resources under
    ``metax-tech.com/``; PortError when the kubelet does not answer."""
    found: dict[str, list[str]] = {}
    for pod, listed in _held(socket, timeout):
        if listed.resource.startswith(PREFIX):
            for device_id in listed.ids:
                found.setdefault(device_id, []).append(f"{pod.namespace}/{pod.name}")
    return found
