"""The checked-in PodResources gRPC code is exactly what its .proto and the pinned generator produce,
and the .proto is upstream's kubelet ``v1`` service (the methods the kubelet serves)."""

from __future__ import annotations

from metax_k8s.podresources import regen
from metax_k8s.podresources.v1 import api_pb2


def test_regenerating_gives_the_checked_in_files() -> None:
    assert regen.drifted() == []


def test_proto_is_upstream_kubelet_podresources_v1() -> None:
    services = {s.full_name: sorted(m.name for m in s.methods) for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {"v1.PodResourcesLister": ["Get", "GetAllocatableResources", "List"]}
