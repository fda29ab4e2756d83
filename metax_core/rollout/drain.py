"""Draining the nodes a driver rollout wants (issue 41 item 3; R-ROLLOUT; docs/rollout.md "Draining").

Why a layer of its own around the machine: the seed's rule is that a node running GPU workloads is never
touched, and the machine keeps it (it waits, and names the node in `Decision.waiting`). On a cluster that is
never idle that rollout never ends. With ``upgradePolicy.drain.enable`` this layer takes the nodes the machine
waits for, in its order and never more than maxParallel at a time, and says to cordon them and evict their GPU
workloads (`Decision.drain`; the operator uses the Eviction API, so PodDisruptionBudgets hold). A drained node
is idle, and the machine upgrades it like any idle node; `decide` offers draining nodes to it first. Once the
node's driver pod is ready on the revision the rollout wants (or has failed) the node is uncordoned
(`Decision.uncordon`). So a node is never left cordoned holding a slot:

- a node whose GPU workloads do not leave within ``timeoutSeconds`` is uncordoned and released: the status
  names it and what blocked it (`metax_core.rollout.model.Node.drain_blocker`), and it is drained again only
  when no other node waits;
- ``pause: true``, drain switched off, a step (or the fallback) waiting for an administrator, and the end of the
  rollout uncordon every node the rollout holds; nothing new is drained then.

The machine's own rules are untouched: the nodes it restarts, when, and in which direction. This layer only
decides which busy nodes to empty for it and when to give them back, and keeps that in the status
(``drainingNodes``, ``releasedNodes``), so an operator restart continues where it stopped. Which pods are
evicted, and what blocks a drain, is `metax_core.cluster.eviction`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.rollout import plan as rollout_plan
from metax_core.rollout.model import Decision, Node, Revision
from metax_core.rollout.status import DrainedNode, Phase, StepStatus, UpgradeStatus
from metax_core.spec import model as spec
from metax_core.wire import meta

DRAIN_RECHECK = dt.timedelta(seconds=5)
"""Look again this soon while a node drains: its pods leave without an event the operator watches."""
_BACKWARD = frozenset({Phase.TERMINATING, Phase.DISABLING})


def draining(previous: UpgradeStatus | None) -> frozenset[str]:
    """The nodes the rollout holds cordoned now (`decide` offers them to the machine first)."""
    return frozenset(n.name for n in previous.status.draining_nodes) if previous is not None else frozenset()


def apply(
    policy: spec.UpgradePolicy,
    previous: UpgradeStatus,
    nodes: Sequence[Node],
    decision: Decision,
    now: dt.datetime,
    *,
    by_name: Mapping[str, Node] | None = None,
) -> Decision:
    """``decision`` with the nodes to hold cordoned (and drain), the nodes to uncordon, and the status that
    remembers them. ``previous`` is the stored status in UTC; ``nodes`` the fleet the machine decided on, and
    ``by_name`` the same nodes by name when the caller has them (the machine does: one pass fewer, P4)."""
    drain = policy.drain
    step = previous.status
    upgrading = decision.status.upgrading
    active = bool(drain and drain.enable) and upgrading and not policy.pause and not _waits_for_admin(decision)
    if not (step.draining_nodes or step.released_nodes or decision.drain or decision.uncordon) and not (
        active and decision.waiting
    ):
        return decision  # nothing held, released or to drain (the usual case): the machine's decision as it is
    target = Revision.OLD if decision.status.phase in _BACKWARD else Revision.NEW
    if by_name is None:
        by_name = {n.name: n for n in nodes}
    restarting = set(decision.upgrade) | set(decision.rollback)
    timeout = dt.timedelta(seconds=drain.timeout_seconds if drain else 0)
    released = {n.name: n for n in step.released_nodes} if upgrading else {}
    held: list[DrainedNode] = []
    uncordon: list[str] = []
    for entry in step.draining_nodes:
        node = by_name.get(entry.name)
        if node is None or not active or _done(node, target, restarting):
            uncordon.append(entry.name)
        elif node.busy and now - entry.since >= timeout:
            uncordon.append(entry.name)
            why = node.drain_blocker or "its GPU workloads did not leave"
            released[entry.name] = DrainedNode(
                entry.name, now, f"not drained in {int(timeout.total_seconds())}s: {why}"
            )
        else:
            held.append(attrs.evolve(entry, message=node.drain_blocker if node.busy else ""))
    if active and decision.waiting:
        in_flight = {n.name for n in nodes if n.in_flight} | restarting
        held += _start(policy, by_name, decision.waiting, in_flight, held, released, now, timeout)
    return _with(decision, step, held, released, uncordon, now)


def _waits_for_admin(decision: Decision) -> bool:
    """A step (or the fallback) waits for an administrator's confirmation: nothing stays cordoned meanwhile."""
    return bool(decision.status.status.confirm_token) and not decision.upgrade and not decision.rollback


def _done(node: Node, target: Revision, restarting: set[str]) -> bool:
    """The node's driver pod is on the rollout's revision and ready, or failed: it needs the cordon no longer."""
    return node.name not in restarting and node.revision is target and (node.ready or node.failed)


def _start(
    policy: spec.UpgradePolicy,
    by_name: Mapping[str, Node],
    waiting: Sequence[str],
    in_flight: set[str],
    held: Sequence[DrainedNode],
    released: dict[str, DrainedNode],
    now: dt.datetime,
    timeout: dt.timedelta,
) -> list[DrainedNode]:
    """New nodes to drain: the machine's ``waiting`` nodes in its order, as many as maxParallel leaves room for
    beside the nodes held and the driver pods restarting now (``in_flight``). A released node waits out one more
    timeout, uncordoned, and is drained again only when no other node waits."""
    taken = {n.name for n in held}
    room = rollout_plan.loop_size(policy.max_parallel, len(by_name)) - len(taken | in_flight)
    candidates = [name for name in waiting if name not in taken]
    fresh = [name for name in candidates if name not in released]
    again = [name for name in candidates if name in released and now - released[name].since >= timeout]
    chosen = (fresh or again)[: max(0, room)]
    for name in chosen:
        released.pop(name, None)
    return [DrainedNode(name, now, by_name[name].drain_blocker if name in by_name else "") for name in chosen]


def marked(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The nodes carrying the rollout's cordon mark (``metax-tech.com/rollout-cordon``), for `to_uncordon`."""
    return [
        str(n["metadata"]["name"]) for n in nodes if meta.ROLLOUT_CORDON in (n["metadata"].get("annotations") or {})
    ]


def _with(
    decision: Decision,
    before: StepStatus,
    held: list[DrainedNode],
    released: dict[str, DrainedNode],
    uncordon: list[str],
    now: dt.datetime,
) -> Decision:
    """The decision with what this layer decided; ``lastUpdateTime`` moves when the drained nodes change."""
    status = decision.status
    draining = tuple(sorted(held, key=lambda n: n.name))
    kept = tuple(sorted(released.values(), key=lambda n: n.name))
    step = attrs.evolve(status.status, draining_nodes=draining, released_nodes=kept)
    if (draining, kept) != (before.draining_nodes, before.released_nodes):
        step = attrs.evolve(step, last_update_time=now)
    requeue = decision.requeue_after
    if draining:
        requeue = DRAIN_RECHECK if requeue is None else min(requeue, DRAIN_RECHECK)
    return attrs.evolve(
        decision,
        status=attrs.evolve(status, status=step),
        drain=tuple(n.name for n in draining),
        uncordon=tuple(sorted(set(uncordon))),
        requeue_after=requeue,
    )


def to_uncordon(decision: Decision, marked: Iterable[str]) -> tuple[str, ...]:
    """The decision's nodes to give back, and every node still carrying the rollout's cordon mark that it does not
    hold (an operator stopped between cordoning a node and storing the status that says so, or a status lost)."""
    return tuple(sorted(set(decision.uncordon) | (set(marked) - set(decision.drain))))
