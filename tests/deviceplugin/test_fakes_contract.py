"""The small fakes gpu-device's tests use (`fakes.py`) obey the same contract as the real adapters.

One suite per port, run against both: the fake `DeviceInventory` / `GpuMonitor` against the real sysfs and
mx-smi adapters on a fake host (`metax_hw_fake`), the fake `NodeMetadata` against the real
`metax_k8s.nodes.K8sNodeMetadata` on the in-memory API server. A behaviour a fake has and the real adapter
lacks would make gpu-device's tests prove nothing; this suite fails first.

Aspects: functions sorted and unique, VFs point at a listed PF, device nodes host-absolute under /dev;
health has an entry for every metax-bound function and nothing else; node metadata patches set and remove
only the given keys, and an unknown node reads as None.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from metax_core.inventory import FunctionKind
from metax_core.ports.cluster import NodeMetadata
from metax_core.ports.hardware import DeviceInventory, GpuMonitor
from metax_hw_fake import builder
from metax_k8s.inmemory import cluster as inmemory

from .fakes import FakeInventory, FakeMonitor, FakeNodeMetadata, gpu, vf


@attrs.frozen
class Hardware:
    inventory: DeviceInventory
    monitor: GpuMonitor


@pytest.fixture(params=["fakes", "real-adapter-on-fake-host"])
def hardware(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Hardware]:
    if request.param == "fakes":
        pfs = [gpu(0x09), gpu(0x0A), gpu(0x89, numa=1)]
        inventory = FakeInventory([*pfs, vf(pfs[0], 0), vf(pfs[0], 1)])
        yield Hardware(inventory, FakeMonitor(inventory))
    else:
        fake = builder.FakeHostBuilder().gpus(3).build(tmp_path / "host")
        fake.binder.set_vf_count(fake.gpu_addresses()[0], 2)
        yield Hardware(fake.hw.devices, fake.hw.monitor)


def test_functions_are_sorted_unique_and_vfs_point_at_listed_pfs(hardware: Hardware) -> None:
    functions = hardware.inventory.functions()
    addresses = [f.address for f in functions]
    assert addresses == sorted(set(addresses))
    pfs = {f.address for f in functions if f.kind is FunctionKind.PF}
    vfs = [f for f in functions if f.kind is FunctionKind.VF]
    assert len(pfs) == 3 and len(vfs) == 2
    assert all(v.physfn in pfs for v in vfs)
    assert isinstance(hardware.inventory.iommu_enabled(), bool)


def test_device_nodes_are_host_absolute_under_dev(hardware: Hardware) -> None:
    for f in hardware.inventory.functions():
        if f.kind is FunctionKind.PF:
            nodes = hardware.inventory.device_nodes(f.address)
            assert nodes and all(n.startswith("/dev/") for n in nodes), nodes


def test_health_covers_every_metax_bound_function_and_nothing_else(hardware: Hardware) -> None:
    functions = hardware.inventory.functions()
    health = hardware.monitor.health()
    bound = {f.address for f in functions if f.driver == "metax"}
    assert bound <= set(health) <= {f.address for f in functions}
    assert all(h.address == a and isinstance(h.healthy, bool) for a, h in health.items())
    assert all(health[a].healthy for a in bound)


@pytest.fixture(params=["fake", "k8s-adapter-on-inmemory-server"])
def nodes(request: pytest.FixtureRequest) -> NodeMetadata:
    if request.param == "fake":
        return FakeNodeMetadata("n1", {"team": "ml"})
    k8s = inmemory.InMemoryCluster()
    k8s.add_node("n1", labels={"team": "ml"})
    return k8s.node_metadata


def labels_of(node: Any) -> dict[str, str]:
    return dict(node["metadata"].get("labels") or {})


def test_node_metadata_patches_only_the_given_keys(nodes: NodeMetadata) -> None:
    nodes.patch_node_metadata("n1", labels={"a": "1", "b": "2"}, annotations={"x": "y"})
    nodes.patch_node_metadata("n1", labels={"a": None, "b": "3"})
    node = nodes.get_node("n1")
    assert labels_of(node) == {"team": "ml", "b": "3"}
    assert (node or {})["metadata"]["annotations"] == {"x": "y"}
    assert nodes.get_node("absent") is None
