"""topo-worker on a fake host with a multi-switch layout and the in-memory cluster (C7, R-LABELS topology part).

Covers: the topology document (GPUs with their PCIe path and NUMA node as sysfs has them, MetaXLink peers from
mx-smi, NICs with the GPUs under their root port) and HAMi's scores/losses for every GPU count appear; a steady
state makes no write; a GPU falling off the bus leaves the free set and the counts; mx-smi failing keeps the
last links; an uninstall request stops publishing.
"""

from __future__ import annotations

import pathlib

from metax_core.errors import PortError
from metax_core.node import uninstall
from metax_core.topology import document, placement
from metax_hw_fake import builder
from services.topo_worker import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, Node, make_node


def worker(n: Node) -> agent.TopoWorker:
    s = config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE)
    return bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("topo-worker"), clock=n.clock)


def eight_gpus() -> builder.FakeHostBuilder:
    """Eight GPUs on four PCIe switches over two NUMA nodes, MetaXLink in groups of four, a NIC on switch 0."""
    return (
        builder.FakeHostBuilder()
        .gpus(8, numa_nodes=2, switches=4, metaxlink_group=4)
        .nics(builder.NicSpec("ens1f0", switch=0), builder.NicSpec("eno1", numa=1))
    )


def test_document_and_hami_counts_describe_the_fake_host(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, eight_gpus())
    worker(n).tick()
    ann = n.annotations()
    doc = document.decode(ann[document.TOPOLOGY])
    functions = {f.address: f for f in n.fake.devices.functions()}
    assert [g.address for g in doc.gpus] == n.fake.gpu_addresses() == list(doc.free)
    for g in doc.gpus:
        assert g.pcie_path == functions[g.address].pcie_path and len(g.pcie_path) == 3  # root port + switch ports
        assert g.numa_node == functions[g.address].numa_node
    first, second = doc.gpus[:4], doc.gpus[4:]
    assert all(set(g.metaxlink) == {o.address for o in first} - {g.address} for g in first)
    assert all(set(g.metaxlink) == {o.address for o in second} - {g.address} for g in second)
    nics = {nic.name: nic for nic in doc.nics}
    on_switch0 = [g.address for g in doc.gpus if g.pcie_path[:2] == nics["ens1f0"].pcie_path[:2]]
    assert nics["ens1f0"].gpus == tuple(on_switch0) and len(on_switch0) == 2
    assert nics["eno1"].gpus == () and nics["eno1"].numa_node == 1
    scores = placement.decode_counts(ann[document.SCORES])
    losses = placement.decode_counts(ann[document.LOSSES], key=document.LOSSES)
    assert sorted(scores) == sorted(losses) == list(range(1, 9))
    assert scores[4] == 100 and scores[8] < 100 and losses[8] == 0
    assert scores == {k: c.score for k, c in placement.best_sets(doc).items()}


def test_steady_state_makes_no_write_and_an_unhealthy_gpu_leaves_the_counts(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, eight_gpus())
    w = worker(n)
    w.tick()
    writes = n.writes()
    n.clock.advance(31)
    w.tick()
    assert n.writes() == writes and w.publisher.patches == 1
    gone = n.fake.gpu_addresses()[0]
    n.fake.fall_off_bus(gone)
    n.clock.advance(31)
    w.tick()
    doc = document.decode(n.annotations()[document.TOPOLOGY])
    assert gone not in doc.free and len(doc.free) == 7
    assert sorted(placement.decode_counts(n.annotations()[document.SCORES])) == list(range(1, 8))


def test_gpus_pods_hold_are_not_free_and_a_silent_kubelet_keeps_the_last_answer(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, eight_gpus())
    first, second = n.fake.gpu_addresses()[:2]
    answers: list[object] = [{"metax-tech.com/gpu": [first], "metax-tech.com/sgpu": [f"{second}-03"]}]

    def held() -> dict[str, list[str]]:
        answer = answers[-1]
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    s = config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE)
    w = bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw, held=held), ports=n.ports("topo-worker"), clock=n.clock)
    w.tick()
    doc = document.decode(n.annotations()[document.TOPOLOGY])
    assert first not in doc.free and second not in doc.free and len(doc.free) == 6
    assert sorted(placement.decode_counts(n.annotations()[document.SCORES])) == list(range(1, 7))
    answers.append(PortError("kubelet PodResources List failed: UNAVAILABLE"))
    n.clock.advance(31)
    w.tick()
    assert document.decode(n.annotations()[document.TOPOLOGY]).free == doc.free
    answers.append({})
    n.clock.advance(31)
    w.tick()
    assert len(document.decode(n.annotations()[document.TOPOLOGY]).free) == 8


def test_mx_smi_failing_keeps_the_last_links(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, eight_gpus(), timeout=1.0)
    w = worker(n)
    w.tick()
    before = n.annotations()
    for mode in ("hang", "garbage", "fail"):
        n.fake.break_mx_smi(mode)
        n.clock.advance(31)
        w.tick()
        assert n.annotations() == before


def test_uninstall_request_stops_publishing(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, eight_gpus())
    w = worker(n)
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request("u1"))
    w.tick()
    assert document.TOPOLOGY not in n.annotations()
