"""gpu-device on the real hardware adapter (`metax_hw`: sysfs + mx-smi) over a fake host (`metax_hw_fake`),
through the test kubelet — the production code path except the kernel and the vendor tool:

- GPUs, NUMA nodes and device nodes come from the fake sysfs; the CDI spec names the real device nodes;
- GetPreferredAllocation follows the fake host's PCIe switches;
- a GPU that falls off the bus turns Unhealthy (mx-smi and config space), and Healthy when restored;
- a GPU rebound to vfio-pci moves to ``metax-tech.com/vfio-gpu`` with its real IOMMU group;
- with SR-IOV VFs, the PFs are withdrawn and the VFs advertised.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator

import pytest

from metax_core.inventory import PciAddress
from metax_core.node import readiness
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost
from services.gpu_device import bootstrap, config

from .cdi_rules import problems
from .fakes import FakeNodeMetadata

GPU = "metax-tech.com/gpu"
VFIO = "metax-tech.com/vfio-gpu"

Start = Callable[[builder.FakeHostBuilder], tuple[FakeHost, Kubelet]]


@pytest.fixture
def on_fake_host() -> Iterator[Start]:
    base = pathlib.Path(tempfile.mkdtemp(prefix="dph", dir="/tmp"))
    stop = threading.Event()
    threads: list[threading.Thread] = []
    kubelets: list[Kubelet] = []

    def start(host: builder.FakeHostBuilder) -> tuple[FakeHost, Kubelet]:
        fake = host.build(base / "h")
        board = hostfiles.FileReadinessBoard(fake.root)
        for component in config.default_required():
            board.publish(readiness.ComponentReadiness(component, True))
        kubelet = Kubelet(fake.root / "var/lib/kubelet/device-plugins").start()
        kubelets.append(kubelet)
        settings = config.Settings(
            node_name="n",
            host_root=fake.root,
            tick=0.02,
            healthy_interval=0.2,
            inventory_interval=0.2,
            label_interval=0.2,
            readiness_interval=0.2,
        )
        agent = bootstrap.bootstrap(
            settings, inventory=fake.devices, monitor=fake.monitor, nodes=FakeNodeMetadata("n"), board=board
        )
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        threads.append(thread)
        return fake, kubelet

    try:
        yield start
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        for kubelet in kubelets:
            kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_lists_sysfs_gpus_with_real_device_nodes_and_topology(on_fake_host: Start) -> None:
    fake, kubelet = on_fake_host(builder.FakeHostBuilder().gpus(4, numa_nodes=2, switches=2))
    addresses = set(fake.gpu_addresses())
    kubelet.wait_for(lambda: kubelet.healthy(GPU) == addresses, what="the fake host's GPUs")

    numa = sorted({n.ID for d in kubelet.devices[GPU].values() for n in d.topology.nodes})
    assert numa == [0, 1]
    spec = json.loads((fake.root / "var/run/cdi/metax-tech.com-gpu.json").read_text())
    assert problems(spec) == []
    [response] = kubelet.allocate(GPU, [min(addresses)]).container_responses
    node_paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert [d.host_path for d in response.devices] == node_paths
    assert any(p.startswith("/dev/dri/") for p in node_paths)

    paths = {f.address: f.pcie_path for f in fake.devices.functions()}

    def shared(a: str, b: str) -> int:
        return len(
            os.path.commonprefix(  # noqa: RUF071 (characters of sysfs paths, on purpose)
                [paths[PciAddress(a)], paths[PciAddress(b)]]
            )
        )

    pair = kubelet.preferred(GPU, sorted(addresses), [], 2)
    assert shared(*pair) == max(shared(a, b) for a in addresses for b in addresses if a != b) >= 2


def test_gpu_falling_off_the_bus_is_unhealthy_until_restored(on_fake_host: Start) -> None:
    fake, kubelet = on_fake_host(builder.FakeHostBuilder().gpus(2))
    first, second = fake.gpu_addresses()
    kubelet.wait_for(lambda: kubelet.healthy(GPU) == {first, second})

    fake.fall_off_bus(second)
    kubelet.wait_for(lambda: kubelet.unhealthy(GPU) == {second}, what="the fallen GPU to be Unhealthy")

    fake.clear_faults()
    kubelet.wait_for(lambda: kubelet.healthy(GPU) == {first, second}, what="recovery")


def test_gpu_bound_to_vfio_becomes_vfio_gpu(on_fake_host: Start) -> None:
    fake, kubelet = on_fake_host(builder.FakeHostBuilder().gpus(2).iommu().vfio())
    first, second = fake.gpu_addresses()
    kubelet.wait_for(lambda: kubelet.healthy(GPU) == {first, second})

    fake.binder.bind(second, "vfio-pci")
    kubelet.wait_for(lambda: kubelet.healthy(VFIO) == {second}, what="vfio-gpu")
    kubelet.wait_for(lambda: kubelet.healthy(GPU) == {first})
    group = fake.devices.function(second).iommu_group
    [response] = kubelet.allocate(VFIO, [second]).container_responses
    assert [d.host_path for d in response.devices] == ["/dev/vfio/vfio", f"/dev/vfio/{group}"]


def test_vfs_replace_their_pfs(on_fake_host: Start) -> None:
    fake, kubelet = on_fake_host(builder.FakeHostBuilder().gpus(2).vfs(2))
    pfs = set(fake.gpu_addresses())
    vfs = {vf for pf in pfs for vf in fake.vfs_of(pf)}
    assert len(vfs) == 4
    kubelet.wait_for(lambda: set(kubelet.devices.get(GPU, {})) == vfs, what="the VFs, without their PFs")
