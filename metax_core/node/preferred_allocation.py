"""Which devices a multi-device container should preferably get (the device plugin's GetPreferredAllocation).

Why a module of its own: `metax_core.node.devices` decides what is advertised and what a container receives;
this is the one choice in between that looks at where devices sit: as many distinct physical GPUs as possible,
as close together as possible (shares of one GPU, common PCIe switches, the same NUMA node), the same answer
for the same inputs in any order. The DRA driver's topology hand-out (`metax_core.topology.handout`) leaves VFs
and sGPU shares to it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import attrs

from metax_core.inventory import PciAddress
from metax_core.node.devices import Device


@attrs.frozen
class Placement:
    """Where a device sits: enough to judge which devices are close together."""

    id: str
    gpu: PciAddress | None = None
    numa_node: int | None = None
    pcie_path: tuple[PciAddress, ...] = ()

    @classmethod
    def of(cls, device: Device) -> Placement:
        f = device.function
        return cls(device.id, f.physfn or f.address, f.numa_node, f.pcie_path)


def closeness(a: Placement, b: Placement) -> int:
    """Higher is closer: shares of one GPU, then deeper common PCIe switches, then the same NUMA node."""
    if a.gpu is not None and a.gpu == b.gpu:
        return 100
    common = 0
    for x, y in zip(a.pcie_path, b.pcie_path, strict=False):
        if x != y:
            break
        common += 1
    same_numa = a.numa_node is not None and a.numa_node == b.numa_node
    return 10 * common + (5 if same_numa else 0)


def _grow(seed: list[Placement], pool: list[Placement], size: int) -> list[Placement]:
    """Greedily add the device that covers a new physical GPU and is closest to the chosen ones."""
    chosen = list(seed)
    gpus = {p.gpu for p in chosen}
    rest = [p for p in pool if p.id not in {c.id for c in chosen}]
    gain = {p.id: sum(closeness(p, c) for c in chosen) for p in rest}
    while len(chosen) < size and rest:
        # ``rest`` is sorted by id and max() keeps the first of equal keys: ties go to the smallest id.
        best = max(rest, key=lambda p: (p.gpu is None or p.gpu not in gpus, gain[p.id]))
        rest.remove(best)
        chosen.append(best)
        gpus.add(best.gpu)
        for p in rest:
            gain[p.id] += closeness(p, best)
    return chosen


def _quality(chosen: Sequence[Placement]) -> tuple[int, int]:
    distinct = len({p.gpu if p.gpu is not None else p.id for p in chosen})
    total = sum(closeness(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1 :])
    return distinct, total


def preferred_allocation(available: Iterable[Placement], must_include: Collection[str], size: int) -> tuple[str, ...]:
    """The best ``size`` devices among ``available``: every ``must_include`` one that is available, then as
    many distinct physical GPUs as possible, as close together as possible (same switch, same NUMA node).

    Never returns a device that is not available; returns ``min(size, len(available))`` devices (more only
    when more than ``size`` devices must be included); the same inputs in any order give the same answer.
    """
    pool = sorted({p.id: p for p in available}.values(), key=lambda p: p.id)
    wanted = set(must_include)
    must = [p for p in pool if p.id in wanted]
    if size >= len(pool):
        return tuple(p.id for p in pool)
    if len(must) >= size:
        return tuple(p.id for p in must)
    if must:
        seeds = [must]
    else:
        # One seed per physical GPU (its smallest-id device): shares of one GPU would give equal results.
        firsts: dict[object, Placement] = {}
        for p in pool:
            firsts.setdefault(p.gpu if p.gpu is not None else p.id, p)
        seeds = [[p] for p in firsts.values()]
    candidates = [_grow(seed, pool, size) for seed in seeds]
    best = min(candidates, key=lambda c: (tuple(-q for q in _quality(c)), sorted(p.id for p in c)))
    return tuple(sorted(p.id for p in best))
