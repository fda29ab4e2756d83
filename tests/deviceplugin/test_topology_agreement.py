"""The set the scheduler counted on is the set the node hands out (issue 24 item 4, C7, C9, C3).

One fake host (eight GPUs on four PCIe switches over two NUMA nodes, MetaXLink in groups of four), the real
hardware adapter under topo-worker and gpu-device, the real device plugin protocol through the test kubelet:

- topo-worker publishes the topology document and HAMi's scores on the Node;
- the extender's ranking of that Node (`extender.NodeFacts.of` on the Node as published) is the score of
  `placement.best_set` on the published document;
- gpu-device's GetPreferredAllocation, over gRPC, hands out exactly that set — with every GPU free, with
  fewer offered by kubelet (some held), and after a GPU falls off the bus and topo-worker republishes.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from metax_core.inventory import PciAddress
from metax_core.node import readiness
from metax_core.topology import document, extender, placement
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost
from services._agent import cluster
from services.gpu_device import bootstrap as device_bootstrap
from services.gpu_device import config as device_config
from services.topo_worker import agent as topo_agent
from services.topo_worker import bootstrap as topo_bootstrap
from services.topo_worker import config as topo_config

from .fakes import FakeNodeMetadata

GPU = "metax-tech.com/gpu"
NODE = "n"


class Rig:
    def __init__(self, base: pathlib.Path) -> None:
        self.fake: FakeHost = (
            builder.FakeHostBuilder().gpus(8, numa_nodes=2, switches=4, metaxlink_group=4).build(base / "h")
        )
        self.meta = FakeNodeMetadata(NODE)
        ports = cluster.ClusterPorts(objects=cast(Any, None), nodes=self.meta, events=None)
        self.topo = topo_bootstrap.bootstrap(
            topo_config.Settings(node_name=NODE, host_root=self.fake.root),
            hw=topo_agent.Hardware.of(self.fake.hw),
            ports=ports,
        )
        board = hostfiles.FileReadinessBoard(self.fake.root)
        for component in device_config.default_required():
            board.publish(readiness.ComponentReadiness(component, True))
        self.kubelet = Kubelet(self.fake.root / "var/lib/kubelet/device-plugins").start()
        settings = device_config.Settings(
            node_name=NODE,
            host_root=self.fake.root,
            tick=0.02,
            healthy_interval=0.1,
            inventory_interval=0.1,
            label_interval=0.1,
            readiness_interval=0.1,
        )
        self.device = device_bootstrap.bootstrap(
            settings, inventory=self.fake.devices, monitor=self.fake.monitor, nodes=self.meta, board=board
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.device.run, args=(self.stop,), daemon=True)

    def published(self) -> document.NodeTopology:
        self.topo.chores.soon("sync")
        self.topo.tick()
        node = self.meta.get_node(NODE)
        assert node is not None
        text = node["metadata"]["annotations"][document.TOPOLOGY]
        # gpu-device reads the Node on its label round: wait until it answers from this very document
        self.kubelet.wait_for(
            lambda: self.device.snapshot.topology == document.decode(text), what="gpu-device to read the document"
        )
        return document.decode(text)

    def ranked(self, n: int) -> int:
        node = self.meta.get_node(NODE)
        assert node is not None
        facts = extender.NodeFacts.of({**node, "status": {"allocatable": {GPU: "8"}}})
        [(_, score)] = extender.prioritize(n, [NODE], {NODE: facts})
        return score


@pytest.fixture
def rig() -> Iterator[Rig]:
    base = pathlib.Path(tempfile.mkdtemp(prefix="topo", dir="/tmp"))
    r = Rig(base)
    r.thread.start()
    try:
        yield r
    finally:
        r.stop.set()
        r.thread.join(timeout=15)
        r.kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_scheduler_ranking_published_scores_and_preferred_allocation_agree(rig: Rig) -> None:
    rig.kubelet.wait_for(lambda: len(rig.kubelet.healthy(GPU)) == 8, what="eight healthy GPUs")
    doc = rig.published()
    for n in (1, 2, 3, 4, 6, 8):
        choice = placement.best_set(doc, n)
        assert choice is not None
        assert rig.ranked(n) == choice.score * extender.MAX_PRIORITY // 100
        handed = rig.kubelet.preferred(GPU, sorted(rig.kubelet.healthy(GPU)), [], n)
        assert tuple(handed) == choice.gpus
    group = placement.best_set(doc, 4)
    assert group is not None and group.score == 100  # one MetaXLink group: what PCIe alone cannot tell

    # kubelet offers fewer (pods hold some): the node still answers with the function's choice on that set
    offered = sorted(set(rig.kubelet.healthy(GPU)) - {group.gpus[0]})
    again = placement.best_set(doc, 4, [PciAddress(a) for a in offered])
    assert again is not None and tuple(rig.kubelet.preferred(GPU, offered, [], 4)) == again.gpus


def test_after_a_gpu_falls_off_the_bus_both_sides_follow(rig: Rig) -> None:
    rig.kubelet.wait_for(lambda: len(rig.kubelet.healthy(GPU)) == 8, what="eight healthy GPUs")
    first = rig.published()
    lost = placement.best_set(first, 4)
    assert lost is not None
    rig.fake.fall_off_bus(lost.gpus[0])
    rig.kubelet.wait_for(lambda: len(rig.kubelet.healthy(GPU)) == 7, what="the fallen GPU to turn unhealthy")
    doc = rig.published()
    assert lost.gpus[0] not in doc.free
    choice = placement.best_set(doc, 4)
    assert choice is not None and choice.gpus != lost.gpus
    assert rig.ranked(4) == choice.score * extender.MAX_PRIORITY // 100
    assert tuple(rig.kubelet.preferred(GPU, sorted(rig.kubelet.healthy(GPU)), [], 4)) == choice.gpus
