"""The one placement decision (`metax_core.topology.placement`, C9) and the topology document (C7).

Covers: link kinds from PCIe paths, NUMA and MetaXLink; the best set is free, of the asked size, and no other
free set of that size scores better (hypothesis, against brute force); ties are deterministic; HAMi's
scores/losses for every count; the document round-trips through its one owner and refuses bad fields.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.inventory import FunctionKind, GpuLink, LinkKind, NetworkInterface, PciAddress, PciFunction
from metax_core.topology import document, placement


def addr(i: int) -> PciAddress:
    return PciAddress(f"0000:{0x10 + i:02x}:00.0")


def gpu(i: int, *, numa: int, root: int, switch: int | None, mx: tuple[int, ...] = ()) -> document.Gpu:
    host = numa * 0x80
    path = [PciAddress(f"0000:{host:02x}:{root:02x}.0")]
    if switch is not None:
        path += [PciAddress(f"0000:{host + 0x40 + switch:02x}:00.0"), PciAddress(f"0000:{host + 0x60 + i:02x}:00.0")]
    return document.Gpu(addr(i), numa, tuple(path), tuple(sorted(addr(m) for m in mx)))


def eight() -> document.NodeTopology:
    """Two NUMA nodes, two switches each with two GPUs, GPUs 0–3 on MetaXLink."""
    gpus = [
        gpu(
            i,
            numa=i // 4,
            root=1 + (i // 2) % 2,
            switch=i // 2,
            mx=tuple(m for m in range(4) if m != i) if i < 4 else (),
        )
        for i in range(8)
    ]
    return document.NodeTopology(gpus=tuple(gpus), free=tuple(g.address for g in gpus))


def test_link_kinds_follow_the_pcie_tree_numa_and_metaxlink() -> None:
    t = eight().by_address()
    assert placement.link(t[addr(0)], t[addr(1)]) is LinkKind.MX
    assert placement.link(t[addr(4)], t[addr(5)]) is LinkKind.PIX  # same switch
    assert placement.link(t[addr(4)], t[addr(6)]) is LinkKind.PHB  # same host bridge, other root port
    far = document.Gpu(addr(9), 1, (PciAddress("0000:c0:01.0"),))
    assert placement.link(t[addr(4)], far) is LinkKind.NODE
    assert placement.link(t[addr(0)], far) is LinkKind.SYS


def test_best_four_is_the_metaxlink_group_and_follows_what_is_free() -> None:
    topo = eight()
    choice = placement.best_set(topo, 4)
    assert choice is not None and choice.gpus == tuple(addr(i) for i in range(4)) and choice.score == 100
    taken = [addr(1)]
    rest = [a for a in topo.free if a not in taken]
    after = placement.best_set(topo, 4, rest)
    assert after is not None and addr(1) not in after.gpus and after.score < 100
    assert placement.best_set(topo, 8, rest) is None


def test_every_count_is_published_for_hami() -> None:
    ann = placement.hami_annotations(eight())
    scores = placement.decode_counts(ann[document.SCORES])
    losses = placement.decode_counts(ann[document.LOSSES], key=document.LOSSES)
    assert sorted(scores) == list(range(1, 9)) == sorted(losses)
    assert scores[1] == 100 and scores[4] == 100 and scores[8] < scores[4]
    assert losses[8] == 0


def test_unknown_free_gpu_is_refused_by_name() -> None:
    with pytest.raises(InvalidSpec, match=r"free: 0000:99:00.0 is not one of the node's GPUs"):
        placement.best_set(eight(), 1, [PciAddress("0000:99:00.0")])


@st.composite
def topologies(draw: st.DrawFn) -> tuple[document.NodeTopology, list[PciAddress], int]:
    k = draw(st.integers(1, 8))
    gpus = []
    for i in range(k):
        numa = draw(st.integers(0, 1))
        switch = draw(st.one_of(st.none(), st.integers(0, 2)))
        gpus.append(gpu(i, numa=numa, root=draw(st.integers(1, 3)), switch=switch))
    pairs = draw(st.sets(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1))))
    mx = {i: {b for a, b in pairs if a == i and b != i} | {a for a, b in pairs if b == i and a != i} for i in range(k)}
    gpus = [attrs_evolve(g, tuple(sorted(addr(m) for m in mx[i]))) for i, g in enumerate(gpus)]
    free = draw(st.lists(st.sampled_from([g.address for g in gpus]), unique=True))
    n = draw(st.integers(1, k))
    return document.NodeTopology(gpus=tuple(gpus), free=tuple(sorted(free))), free, n


def attrs_evolve(g: document.Gpu, mx: tuple[PciAddress, ...]) -> document.Gpu:
    return document.Gpu(g.address, g.numa_node, g.pcie_path, mx)


def inner(topo: document.NodeTopology, members: tuple[PciAddress, ...]) -> int:
    t = topo.by_address()
    return sum(placement.WEIGHTS[placement.link(t[a], t[b])] for a, b in itertools.combinations(members, 2))


@settings(max_examples=150, deadline=None)
@given(topologies())
def test_the_chosen_set_is_free_of_size_n_and_none_scores_better(case: tuple) -> None:
    topo, free, n = case
    choice = placement.best_set(topo, n, free)
    if n > len(free):
        assert choice is None
        return
    assert choice is not None
    assert len(choice.gpus) == n == len(set(choice.gpus)) and set(choice.gpus) <= set(free)
    best = inner(topo, choice.gpus)
    for other in itertools.combinations(sorted(free), n):
        assert inner(topo, other) <= best
    # every count in one search gives the same sets as asking one count at a time
    assert placement.best_sets(topo, free)[n] == choice
    # the order the free GPUs come in does not matter
    assert placement.best_set(topo, n, list(reversed(free))) == choice


def functions() -> list[PciFunction]:
    root, up = PciAddress("0000:00:01.0"), PciAddress("0000:01:00.0")
    return [
        PciFunction(addr(0), 0x9999, 0x4000, numa_node=0, pcie_path=(root, up, PciAddress("0000:02:01.0"))),
        PciFunction(addr(1), 0x9999, 0x4000, numa_node=0, pcie_path=(root, up, PciAddress("0000:02:02.0"))),
        PciFunction(PciAddress("0000:11:00.1"), 0x9999, 0x4001, kind=FunctionKind.VF, physfn=addr(1), numa_node=0),
    ]


def test_build_keeps_pfs_metaxlink_peers_and_nics_under_the_same_root() -> None:
    nic = NetworkInterface(
        "ens1f0", PciAddress("0000:03:00.0"), 0, pcie_path=(PciAddress("0000:00:01.0"), PciAddress("0000:01:00.0"))
    )
    doc = document.build(
        functions(),
        [GpuLink(addr(0), addr(1), LinkKind.MX), GpuLink(addr(0), addr(1), LinkKind.PIX)],
        [nic, NetworkInterface("lo")],
    )
    assert [g.address for g in doc.gpus] == [addr(0), addr(1)] and doc.free == (addr(0), addr(1))
    assert doc.gpus[0].metaxlink == (addr(1),) and doc.gpus[1].metaxlink == (addr(0),)
    assert doc.nics == (
        document.Nic("ens1f0", nic.pci_address, 0, (PciAddress("0000:00:01.0"), PciAddress("0000:01:00.0")), doc.free),
    )


def test_document_round_trips_and_is_canonical() -> None:
    doc = document.build(functions(), free=[addr(1)])
    text = document.encode(doc)
    assert document.decode(text) == doc
    assert document.encode(document.decode(text)) == text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("nope", r"gpu\.topology: not JSON"),
        ('{"version": 2}', r"gpu\.topology\.version: must be 1, got 2"),
        ('{"version": 1, "gpus": [{"address": "a", "numa": -1}]}', r"gpus\[0\]\.numa: must be a NUMA node"),
        ('{"version": 1, "gpus": [{"address": "a"}], "free": ["b"]}', r"free: b is not one of the document's GPUs"),
        ('{"version": 1, "nics": [{"name": 3}]}', r"nics\[0\]\.name: must be an interface name"),
    ],
)
def test_bad_documents_are_refused_by_field(text: str, match: str) -> None:
    with pytest.raises(InvalidSpec, match=match):
        document.decode(text)


def test_counts_round_trip_and_refuse_bad_keys() -> None:
    assert placement.decode_counts(placement.encode_counts({2: 80, 1: 100})) == {1: 100, 2: 80}
    with pytest.raises(InvalidSpec, match=r"scores\.x: must map a GPU count"):
        placement.decode_counts('{"x": 1}')


def test_sixteen_gpus_are_placed_exactly_and_seventeen_refused() -> None:
    gpus = tuple(gpu(i, numa=i // 8, root=1 + i // 4, switch=i // 4) for i in range(17))
    topo = document.NodeTopology(gpus=gpus, free=tuple(g.address for g in gpus[:16]))
    assert len(placement.best_sets(topo)) == 16
    with pytest.raises(InvalidSpec, match="at most 16"):
        placement.best_set(topo, 2, [g.address for g in gpus])


@settings(max_examples=60, deadline=None)
@given(topologies(), st.data())
def test_must_include_gpus_are_held_and_the_rest_is_best(case: tuple, data: st.DataObject) -> None:
    topo, free, n = case
    if not free or n > len(free):
        return
    must = data.draw(st.lists(st.sampled_from(free), unique=True, max_size=n))
    choice = placement.best_set(topo, n, free, must=must)
    assert choice is not None and set(must) <= set(choice.gpus) <= set(free)
    best = inner(topo, choice.gpus)
    assert all(inner(topo, o) <= best for o in itertools.combinations(sorted(free), n) if set(must) <= set(o))
