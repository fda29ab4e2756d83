"""A PodResources server on the kubelet's real ``k8s.io/kubelet/pkg/apis/podresources/v1`` proto (the generated
code in metax_k8s/podresources/v1), on a unix socket, answering what the test sets: the cases a real kubelet
cannot easily be made to show (sGPU shares split between pods, VFs, foreign devices, allocations changing)."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc

from metax_k8s.podresources.v1 import api_pb2, api_pb2_grpc

Container = tuple[str, str, str, str, Sequence[str]]
"""(namespace, pod, container, resource, device IDs)."""


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, server: PodResourcesServer) -> None:
        self.server = server

    def List(self, request: Any, context: Any) -> Any:
        with self.server.lock:
            self.server.calls += 1
            containers = list(self.server.containers)
        pods: dict[tuple[str, str], Any] = {}
        for namespace, pod, container, resource, ids in containers:
            message = pods.setdefault((namespace, pod), api_pb2.PodResources(name=pod, namespace=namespace))
            entry = next((c for c in message.containers if c.name == container), None)
            if entry is None:
                entry = message.containers.add(name=container)
            entry.devices.add(resource_name=resource, device_ids=list(ids))
        return api_pb2.ListPodResourcesResponse(pod_resources=list(pods.values()))

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        return api_pb2.AllocatableResourcesResponse()


class PodResourcesServer:
    def __init__(self, socket: pathlib.Path) -> None:
        self.socket = socket
        self.lock = threading.Lock()
        self.containers: list[Container] = []
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{socket}")

    def set(self, *containers: Container) -> None:
        with self.lock:
            self.containers = list(containers)

    def start(self) -> PodResourcesServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait()
