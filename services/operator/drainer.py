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

import attrs

from metax_core.cluster import eviction, gpu_workloads
from metax_core.dra import slices as dra_slices
from metax_core.errors import ClusterError, NotFound, NotServed
from metax_core.ports.cluster import Events, NodeCordons, Objects, RawObject
from metax_core.rollout.status import format_time
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from services.operator import applier

log = logging.getLogger(__name__)

PDB_API = "policy/v1"


@attrs.define
class Look:
    """What one reconcile read for a rollout's drain (`Drainer.look`)."""

    claims: frozenset[gpu_workloads.Claim]
    drain: spec.Drain | None
    plans: dict[str, eviction.NodeEviction] = attrs.field(factory=dict)
    budgets: Sequence[RawObject] | None = None

    def blockers(self) -> dict[str, str]:
        """Per node being drained: what keeps its GPU workloads there, in words (`Node.drain_blocker`)."""
        return {node: p.describe() for node, p in self.plans.items() if p.blockers}


class Drainer:
    def __init__(self, objects: Objects, cordons: NodeCordons, events: Events) -> None:
        self.objects = objects
        self.events = events
        self.cordons = cordons
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

    def look(self, held: Iterable[str], drain: spec.Drain | None) -> Look:
        """What a reconcile reads once for the rollout: the MetaX claims (the busy-node rule needs them too) and,
        for the nodes being drained, what to evict and what blocks them."""
        seen = Look(self.metax_claims(), drain)
        self.plan(seen, held)
        return seen

    def plan(self, seen: Look, nodes: Iterable[str]) -> None:
        """``seen.plans`` for ``nodes`` it lacks (one list of pods per node; the budgets listed once)."""
        wanted = sorted(set(nodes) - set(seen.plans))
        if seen.drain is None or not wanted:
            return
        if seen.budgets is None:
            seen.budgets = self._budgets()
        for node in wanted:
            seen.plans[node] = eviction.plan(self._pods_on(node), seen.drain, seen.budgets, seen.claims)

    # -- apply --------------------------------------------------------------------------------------------------

    def apply(
        self,
        drain_nodes: Sequence[str],
        uncordon: Sequence[str],
        seen: Look | None,
        now: dt.datetime,
        released: Mapping[str, str] | None = None,
    ) -> None:
        """Uncordon, then cordon and evict (with what ``seen`` read, completed for nodes new to the drain);
        ``released``: nodes whose drain timed out, with what blocked them."""
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
        if not drain_nodes or seen is None or seen.drain is None:
            return
        self.plan(seen, drain_nodes)
        for node in drain_nodes:
            try:
                held = self.cordons.cordon(node, format_time(now))
            except ClusterError as exc:
                log.warning("cannot cordon node %s, not evicting from it: %s", node, exc)
                continue
            plan = seen.plans[node]
            if held and not plan.evict and not plan.blockers:
                continue
            self._evict(node, plan, held)

    def _evict(self, node: str, plan: eviction.NodeEviction, held: bool) -> None:
        evicted: list[str] = []
        for namespace, name in plan.evict:
            try:
                self.objects.evict(name, namespace)
            except NotFound:
                continue
            except ClusterError as exc:
                if exc.status != 429:  # 429: a budget allows no disruption now; the next decision asks again
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
        applier.node_event(self.events, node, reason, message, warning=warning, action="Drain")


def _allocated_by_us(claim: RawObject) -> RawObject | None:
    """A claim as `gpu_workloads.dra_claims` reads it, when it holds MetaX devices; None (dropped) otherwise."""
    return claim if gpu_workloads.dra_claims([claim]) else None
