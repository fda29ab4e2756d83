"""A link of a node's readiness chain, and the diagnosis made of them: what ``metax-operator doctor`` prints.

Why a module of its own: the chain (`chain`) decides which links a node has, each check (`checks`) decides
whether one holds, and the report (`report`) turns them into the summary, the exit code and ``-o json``; all three
speak these records. The link ids are stable (scripts read them from ``-o json``).
"""

from __future__ import annotations

import enum

import attrs


class LinkState(enum.Enum):
    HOLDS = "holds"
    BROKEN = "broken"


@attrs.frozen
class Link:
    id: str
    """Stable, for scripts (``-o json``): ``cluster-operator``, ``operator``, ``node``, ``<component>-deployed``,
    ``<component>-pod``, ``<component>-ready``, ``gpu-found``, ``driver-loaded``, ``vfs``, ``vfio-selection``,
    ``allocatable``, ``gpu-health``; ``<component>`` is the component's signal name (``gpu-label``, ``driver``, …)."""
    title: str
    state: LinkState
    evidence: str
    next: str = ""
    """The command that looks closer (for a broken link)."""
    component: str = ""
    """The chart key of the component the link belongs to (empty for the cluster's and the node's links)."""

    @property
    def holds(self) -> bool:
        return self.state is LinkState.HOLDS


@attrs.frozen
class Diagnosis:
    node: str
    links: tuple[Link, ...]

    @property
    def first_broken(self) -> Link | None:
        return next((link for link in self.links if not link.holds), None)

    @property
    def healthy(self) -> bool:
        return self.first_broken is None

    @property
    def has_gpu(self) -> bool:
        return not any(link.id == GPU_FOUND and not link.holds for link in self.links)


CLUSTER_OPERATOR, OPERATOR, NODE, GPU_FOUND = "cluster-operator", "operator", "node", "gpu-found"
DRIVER_LOADED, VFS, VFIO_SELECTION, ALLOCATABLE = "driver-loaded", "vfs", "vfio-selection", "allocatable"
ALLOCATOR = "allocator"
GPU_HEALTH = "gpu-health"


def ok(link_id: str, title: str, evidence: str, component: str = "") -> Link:
    return Link(link_id, title, LinkState.HOLDS, evidence, component=component)


def broken(link_id: str, title: str, evidence: str, next_command: str, component: str = "") -> Link:
    return Link(link_id, title, LinkState.BROKEN, evidence, next_command, component)
