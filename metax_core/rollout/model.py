"""The rollout machine's inputs and outputs: the fleet snapshot the operator gathers and the decision it applies.

Why a module of its own: these records are the contract between the pure machine (`metax_core.rollout.machine`) and
the operator that gathers and applies; both sides, the simulation and the tests build them, so they stand
apart from the logic that reads them.

Contract for the snapshot (`Node`): a node's revision is NEW exactly when its driver pod carries the
revision being rolled out; a node whose pod is terminating or not yet recreated is reported on the revision
of the DaemonSet's current template, neither ready nor failed ("in flight"); ``failed`` means the driver pod
cannot become ready (crash loop, image pull error, install error, or not ready within the operator's
timeout), which the operator decides.
"""

from __future__ import annotations

import datetime as dt
import enum
import operator
from collections.abc import Iterable, Mapping

import attrs

from metax_core.rollout.status import UpgradeStatus


class Revision(enum.Enum):
    """Which driver a node's pod runs, relative to the rollout."""

    OLD = "old"
    NEW = "new"


class Template(enum.Enum):
    """Which pod template the metax-driver DaemonSet must carry."""

    NEW = "new"
    """The desired template (the revision being rolled out, or simply the current one)."""
    LAST_APPLIED = "lastApplied"
    """``status.upgradeStatus.lastAppliedSpec``: the template before the rollout (rolling back, or rolled back)."""


def _not_ready_and_failed(instance: Node, attribute: attrs.Attribute[bool], value: bool) -> None:
    if value and instance.ready:
        raise ValueError(f"node {instance.name}: a driver pod cannot be both ready and failed")


@attrs.frozen
class Node:
    """One node in scope of the driver DaemonSet, as the operator sees it now."""

    name: str
    revision: Revision
    ready: bool = True
    """The driver pod is ready."""
    failed: bool = attrs.field(default=False, validator=_not_ready_and_failed)
    """The driver pod will not become ready without help."""
    busy: bool = False
    """GPU workloads run on the node: the rollout will not restart its driver."""
    drain_blocker: str = ""
    """For a node being drained: what keeps its GPU workloads there (the operator's `metax_core.cluster.eviction`)."""

    @property
    def in_flight(self) -> bool:
        return not self.ready and not self.failed


def _unique_names(instance: Fleet, attribute: attrs.Attribute[tuple[Node, ...]], value: tuple[Node, ...]) -> None:
    if len(instance.by_name) != len(value):
        names = [n.name for n in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"node names must be unique in a fleet snapshot: {', '.join(twice)}")


_NAME = operator.attrgetter("name")


def _in_name_order(value: Iterable[Node]) -> tuple[Node, ...]:
    return tuple(sorted(value, key=_NAME))


@attrs.frozen
class Fleet:
    """A snapshot of every node in scope, and what a rollout starting now would record.

    The snapshot is indexed once, where it is made: its nodes in name order (the order the machine takes them
    in; the operator gathers them so, and sorting a sorted list is one pass) and by name. The machine reads
    both on every decision, and a pass over 10,000 nodes costs about as much as the rest of a decision (P4,
    docs/benchmarks.md).
    """

    nodes: tuple[Node, ...] = attrs.field(converter=_in_name_order, validator=_unique_names)
    """In name order."""
    old_revision: str = ""
    """The revision the DaemonSet carries now (before any new template is applied)."""
    new_revision: str = ""
    """The revision of the desired template (rendered from the current spec)."""
    old_spec: str = ""
    """The DaemonSet's current pod template, serialised: becomes lastAppliedSpec when a rollout starts."""
    old_driver_spec: str = ""
    """spec.driver as of the current template, serialised: becomes lastCoDriverSpec when a rollout starts."""
    by_name: Mapping[str, Node] = attrs.field(init=False, eq=False, repr=False)
    """The nodes by name (a name given twice is an error: `_unique_names`)."""

    @by_name.default
    def _index(self) -> Mapping[str, Node]:
        return {n.name: n for n in self.nodes}


@attrs.frozen
class Decision:
    """What the operator does now. Apply in this order: the template, the deletions, the status.

    The metax-driver DaemonSet always uses ``updateStrategy: OnDelete``: its pods change only when a decision
    deletes them, also when enableRollout is false (then every idle node is upgraded at once).
    """

    status: UpgradeStatus
    template: Template
    upgrade: tuple[str, ...] = ()
    """Delete these nodes' driver pods: they come back on the new revision."""
    rollback: tuple[str, ...] = ()
    """Delete these nodes' driver pods: they come back on lastAppliedSpec (template is LAST_APPLIED)."""
    ignored_confirmation: str = ""
    """Why the confirmation annotation given to `decide` confirms nothing (another step, an older rollout);
    empty when it was used or no step waits. The operator reports it as an Event. The operator never writes
    ``spec``: a waiting step is described in ``status`` (``confirmToken``, ``waitingSince``)."""
    waiting: tuple[str, ...] = ()
    """Nodes the rollout wants to restart but will not while GPU workloads run on them."""
    drain: tuple[str, ...] = ()
    """Nodes to hold cordoned and evict the GPU workloads of (upgradePolicy.drain; `metax_core.rollout.drain`)."""
    uncordon: tuple[str, ...] = ()
    """Nodes the rollout cordoned and now gives back (the operator uncordons only what it cordoned itself)."""
    requeue_after: dt.timedelta | None = None
    """Call `decide` again after this long (0: at once); None: only when the spec or the fleet changes."""
