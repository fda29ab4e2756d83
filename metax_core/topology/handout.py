"""What gpu-device answers kubelet's GetPreferredAllocation with for whole GPUs: `placement.best_set` on the
node's published topology document, the one the scheduler ranked the node by (docs/topology.md).

When no document is published yet (topo-worker off or not yet run), or it does not know every offered GPU
(a GPU appeared since), the document is built from gpu-device's own inventory: the same PCIe paths and NUMA
nodes, without MetaXLink peers. Devices that are not whole GPUs (VFs, sGPU shares) are not this module's:
`metax_core.node.preferred_allocation` places those.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from metax_core.inventory import FunctionKind, PciAddress, PciFunction
from metax_core.topology import document, placement


def preferred(
    topology: document.NodeTopology | None,
    functions: Sequence[PciFunction],
    available: Sequence[str],
    must_include: Collection[str],
    size: int,
) -> tuple[str, ...] | None:
    """The best ``size`` of ``available`` whole GPUs holding ``must_include``; None when the offered devices
    are not all whole GPUs of ``functions`` (the caller places them otherwise)."""
    pfs = {f.address: f for f in functions if f.kind is FunctionKind.PF}
    offered = sorted(set(available))
    if not offered or any(PciAddress(a) not in pfs for a in offered):
        return None
    if topology is None or any(PciAddress(a) not in topology.by_address() for a in offered):
        topology = document.build(pfs.values())
    held = [PciAddress(a) for a in must_include if a in offered]
    choice = placement.best_set(topology, max(1, min(size, len(offered))), [PciAddress(a) for a in offered], must=held)
    if choice is None:  # more devices must be held than asked for: kubelet gets them all
        return tuple(sorted(held))
    return tuple(choice.gpus)
