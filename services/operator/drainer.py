"""The operator's hands for a driver rollout's drain (issue 41 item 3; docs/rollout.md "Draining").

The rollout decides which nodes to hold cordoned and which to give back (`metax_core.rollout.drain`); which pods
of a node to evict and what blocks a drain is `metax_core.cluster.eviction`'s. This gathers what those two read
(the pods on the nodes being drained, the cluster's PodDisruptionBudgets) and carries out their answers: cordon
(`metax_k8s.cordon`, only what the rollout cordoned is ever uncordoned), evict through the Eviction API (a
budget that allows no disruption answers 429; the next decision asks again), uncordon, and an Event on the
Node for each, so ``kubectl describe node`` says why it is cordoned.

Quiet when nothing changes: a node held cordoned is not patched again, a pod is evicted once per decision while
it is there, and nodes with nothing to evict cost one list of their pods.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence

from metax_core.cluster import eviction, gpu_workloads
from metax_core.dra import slices as dra_slices
from metax_core.errors import ClusterError, NotFound, NotServed
from metax_core.ports.cluster import Events, EventType, ObjectRef, Objects, RawObject
from metax_core.rollout.status import format_time
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from metax_k8s import cordon
from metax_k8s.api import Api

log = logging.getLogger(__name__)

PDB_API = "policy/v1"


class Drainer:
    def __init__(self, api: Api, objects: Objects, events: Events, *, field_manager: str) -> None:
        self.api = api
        self.objects = objects
        self.events = events
        self.cordons = cordon.Cordons(api, field_manager=field_manager)
        self.evictions = 0
        """Eviction requests sent (the benchmark and tests count them)."""
        self.refused = 0
        """Of those, refused by a PodDisruptionBudget (429)."""
        self._said: dict[str, str] = {}
        """The blockers last reported per node: a DrainBlocked Event only when they change, not every decision."""

    # -- gather -------------------------------------------------------------------------------------------------

    def _pods_on(self, node: str) -> Sequence[RawObject]:
        return self.objects.list("v1", "Pod", field_selector=f"spec.nodeName={node}").items

    def _budgets(self) -> Sequence[RawObject]:
        return self.objects.list(PDB_API, "PodDisruptionBudget").items

    def metax_claims(self) -> frozenset[gpu_workloads.Claim]:
        """The ResourceClaims allocated MetaX devices (none on a cluster that does not serve DRA)."""
        try:
            claims = self.objects.list(dra_slices.API_VERSION, "ResourceClaim", transform=_allocated_by_us).items
        except NotServed:
            return frozenset()
        return gpu_workloads.dra_claims(claims)

    def plans(self, nodes: Iterable[str], drain: spec.Drain) -> dict[str, eviction.NodeEviction]:
        """What to evict on each node and what blocks it (one list of pods per node, one of budgets and one of
        claims in all)."""
        wanted = sorted(set(nodes))
        if not wanted:
            return {}
        budgets, claimed = self._budgets(), self.metax_claims()
        return {node: eviction.plan(self._pods_on(node), drain, budgets, claimed) for node in wanted}

    def blockers(self, nodes: Iterable[str], drain: spec.Drain | None) -> dict[str, str]:
        """For the nodes being drained: what keeps their GPU workloads there, in words (`Node.drain_blocker`)."""
        if drain is None:
            return {}
        return {node: p.describe() for node, p in self.plans(nodes, drain).items() if p.blockers}

    # -- apply --------------------------------------------------------------------------------------------------

    def apply(
        self,
        drain_nodes: Sequence[str],
        uncordon: Sequence[str],
        policy: spec.Drain | None,
        now: dt.datetime,
        released: Mapping[str, str] | None = None,
    ) -> None:
        """Uncordon, then cordon and evict; ``released``: nodes whose drain timed out, with what blocked them."""
        for node in uncordon:
            why = (released or {}).get(node)
            message = (
                f"uncordoned: not drained in time ({why}); drained again after the other nodes"
                if why
                else "uncordoned: the driver rollout is done with it"
            )
            try:
                self._said.pop(node, None)
                if self.cordons.uncordon(node):
                    self._event(node, event_reasons.ROLLOUT_UNCORDONED, message, warning=bool(why))
            except ClusterError as exc:
                log.warning("cannot uncordon node %s: %s", node, exc)
        if not drain_nodes or policy is None:
            return
        plans = self.plans(drain_nodes, policy)
        for node in drain_nodes:
            try:
                held = self.cordons.cordon(node, format_time(now))
            except ClusterError as exc:
                log.warning("cannot cordon node %s, not evicting from it: %s", node, exc)
                continue
            plan = plans[node]
            if held and not plan.evict and not plan.blockers:
                continue
            self._evict(node, plan, held)

    def _evict(self, node: str, plan: eviction.NodeEviction, held: bool) -> None:
        evicted: list[str] = []
        for namespace, name in plan.evict:
            self.evictions += 1
            try:
                self.api.evict(name, namespace)
            except NotFound:
                continue
            except ClusterError as exc:
                if exc.status == 429:
                    self.refused += 1
                else:
                    log.warning("cannot evict pod %s/%s from node %s: %s", namespace, name, node, exc)
                continue
            evicted.append(f"{namespace}/{name}")
        if evicted:
            how = "cordoned" if held else "already cordoned by someone else"
            self._event(
                node,
                event_reasons.ROLLOUT_DRAIN_EVICTED,
                f"{how}; evicted for the driver rollout: {', '.join(evicted)}",
            )
        blocked = plan.describe()
        if blocked and self._said.get(node) != blocked:
            self._event(node, event_reasons.ROLLOUT_DRAIN_BLOCKED, blocked, warning=True)
        self._said[node] = blocked

    def _event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        log.info("node %s: %s", node, message)
        self.events.emit(
            ObjectRef("v1", "Node", node),
            reason=reason,
            message=message,
            type=EventType.WARNING if warning else EventType.NORMAL,
            action="Drain",
        )


def _allocated_by_us(claim: RawObject) -> RawObject | None:
    """A claim as `gpu_workloads.dra_claims` reads it, when it holds MetaX devices; None (dropped) otherwise."""
    return claim if gpu_workloads.dra_claims([claim]) else None
