"""What gpu-device answers its plugin servers' Allocate and GetPreferredAllocation from (`AllocationBackend`).

Why apart from the loop: the loop (`services.gpu_device.agent`) swaps in a new `Snapshot` each round, atomically,
and gRPC threads answer from whichever snapshot they read, so they never see a half-applied state. An answer is
`devices.plan_allocation`'s, kept in the snapshot it came from (Allocate is then a dictionary look-up: P5); GPUs
are preferred by the node's published topology (`handout.preferred`), else by placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from metax_core.inventory import PciAddress
from metax_core.node import devices, preferred_allocation
from metax_core.topology import document, handout


@attrs.frozen
class Snapshot:
    """What Allocate and GetPreferredAllocation answer from: the last applied plan and its inputs, and the
    allocations answered from them so far (Allocate's answer is then a dictionary look-up: P5)."""

    plan: devices.Plan = devices.Plan(devices={})
    device_nodes: Mapping[PciAddress, tuple[str, ...]] = attrs.field(factory=dict)
    node: devices.NodeSettings = devices.NodeSettings()
    resolvable: frozenset[str] | None = None
    """CDI device names in the spec on disk (None: CDI off)."""
    topology: document.NodeTopology | None = None
    """The node's published topology document (topo-worker's), None when absent or unreadable."""
    allocations: dict[devices.AllocationKey, devices.ContainerAllocation] = attrs.field(
        factory=dict, eq=False, repr=False
    )
    """`devices.plan_allocation`'s answers per `devices.allocation_key` (refusals are not kept), at most
    `KEPT_ALLOCATIONS`; they live and die with this snapshot, so a changed plan answers afresh."""

    def renewed(
        self,
        plan: devices.Plan,
        device_nodes: Mapping[PciAddress, tuple[str, ...]],
        node: devices.NodeSettings,
        resolvable: frozenset[str] | None,
        topology: document.NodeTopology | None,
    ) -> Snapshot:
        """The snapshot of this round: this one, with the allocations it answered, when the plan and its
        inputs are the same (most rounds); else a new one, so no allocation outlives the plan it came from
        (a device turned unhealthy, a CDI entry no longer on disk, another QoS policy)."""
        new = Snapshot(plan, device_nodes, node, resolvable, topology)
        return self if new == self else new


KEPT_ALLOCATIONS = 1024
"""At most this many allocations per snapshot (sGPU share sets are many): the rest are answered each time."""


def allocate(
    snap: Snapshot, resource: devices.Resource, ids: Sequence[str], *, shares: int, with_cdi: bool
) -> devices.ContainerAllocation:
    """The allocation ``snap`` answered for these IDs before, else `devices.plan_allocation`'s (kept in the
    snapshot); a refusal is decided afresh every time. The same object for the same answer: the plugin server
    keeps its encoding per object."""
    key = devices.allocation_key(resource, ids)
    allocation = snap.allocations.get(key)
    if allocation is None:
        allocation = devices.plan_allocation(
            resource,
            ids,
            plan=snap.plan,
            device_nodes=snap.device_nodes,
            qos=snap.node.qos,
            shares=shares,
            with_cdi=with_cdi,
            resolvable=snap.resolvable,
        )
        if len(snap.allocations) < KEPT_ALLOCATIONS:
            snap.allocations[key] = allocation
    return allocation


def preferred(
    snap: Snapshot, resource: devices.Resource, available: Sequence[str], must_include: Sequence[str], size: int
) -> Sequence[str]:
    """Whole GPUs by the node's topology (the fewest, best-linked), else devices by placement."""
    known = snap.plan.by_id(resource)
    if resource is devices.Resource.GPU:
        functions = [d.function for d in known.values()]
        whole = handout.preferred(snap.topology, functions, available, must_include, size)
        if whole is not None:
            return whole
    placements = [
        preferred_allocation.Placement.of(known[i]) if i in known else preferred_allocation.Placement(i)
        for i in available
    ]
    return preferred_allocation.preferred_allocation(placements, must_include, size)
