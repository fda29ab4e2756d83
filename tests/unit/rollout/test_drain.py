"""Draining the nodes a rollout wants on a cluster that is never idle (issue 41 item 3; R-ROLLOUT;
`metax_core.rollout.drain`, docs/rollout.md "Draining").

A simulated fleet where every node runs GPU workloads: the test plays the operator (a node in ``Decision.drain``
is cordoned and its workloads leave after a few decisions, unless they are stuck) and stores every status in
its document form (an operator restart between any two decisions keeps nothing else). Asserted over whole runs:
never more nodes held cordoned than maxParallel; every node upgraded exactly once; every node the rollout
cordoned is uncordoned by the end; a node whose workloads never leave is released after the timeout with
what blocked it, the others go on, and it is drained again when no other node waits; pause gives every node back.
"""

from __future__ import annotations

import datetime as dt

import attrs
from rollout_run import NAMES, NO_PAUSES, Run

from metax_core.rollout import drain as rollout_drain
from metax_core.rollout import machine as rollout
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import Phase
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

DRAIN = spec.Drain(enable=True, timeout_seconds=60)
POLICY = attrs.evolve(NO_PAUSES, max_parallel=IoP(2), drain=DRAIN)
LEAVE_AFTER = 3
"""Decisions a drained node's workloads take to leave (evicted, rescheduled elsewhere)."""


class Cluster:
    """The rollout driven like the operator drives it, with the cordons and evictions it would apply."""

    def __init__(self, policy: spec.UpgradePolicy, stuck: frozenset[str] = frozenset()) -> None:
        self.run = Run(policy)
        for name in NAMES:
            self.run.fleet.set(name, busy=True)
        self.stuck = stuck
        self.cordoned: set[str] = set()
        self.evicting: dict[str, int] = {}
        self.most_cordoned = 0
        self.upgrades: list[str] = []
        self.decisions: list[rollout.Decision] = []

    def step(self, seconds: float = 5) -> rollout.Decision:
        d = self.run.decide()
        self.decisions.append(d)
        self.run.status = rollout_status.from_document(rollout_status.to_document(d.status))  # the stored truth
        self.upgrades += d.upgrade
        assert not set(d.upgrade) & {n for n, node in self.run.fleet.nodes.items() if node.busy}  # never under a job
        self.cordoned |= set(d.drain)
        self.cordoned -= set(d.uncordon)
        self.most_cordoned = max(self.most_cordoned, len(self.cordoned))
        for name in d.drain:
            left = self.evicting.setdefault(name, LEAVE_AFTER) - 1
            self.evicting[name] = left
            if left <= 0 and name not in self.stuck:
                self.run.fleet.set(name, busy=False)
            if name in self.stuck:
                self.run.fleet.set(name, drain_blocker="PodDisruptionBudget ml/trainer allows no disruption")
        self.run.now += dt.timedelta(seconds=seconds)
        self.run.settle()
        return d

    def until_done(self, limit: int = 400) -> rollout.Decision:
        for _ in range(limit):
            d = self.step()
            if not d.status.upgrading and self.run.revisions() == {rollout.Revision.NEW}:
                return d
        raise AssertionError(f"the rollout did not finish: {self.decisions[-1].status.message}")


def test_a_busy_fleet_is_drained_at_most_max_parallel_at_a_time_and_every_node_upgraded_once() -> None:
    c = Cluster(POLICY)
    done = c.until_done()
    assert done.status.phase is Phase.IDLING
    assert sorted(c.upgrades) == sorted(NAMES)  # each node once
    assert c.most_cordoned <= 2  # maxParallel
    assert c.cordoned == set()  # every node given back
    assert not done.status.status.draining_nodes and not done.status.status.released_nodes


def test_without_drain_a_busy_fleet_waits_and_nothing_is_cordoned() -> None:
    c = Cluster(NO_PAUSES)
    for _ in range(20):
        d = c.step()
        assert (d.upgrade, d.drain) == ((), ())
    assert set(c.decisions[-1].waiting) and c.cordoned == set()


def test_a_node_whose_workloads_never_leave_is_released_with_its_blocker_and_tried_again_last() -> None:
    stuck = frozenset({NAMES[0]})
    c = Cluster(POLICY, stuck)
    released = None
    for _ in range(200):
        d = c.step(seconds=10)
        if d.status.status.released_nodes:
            released = d
            break
    assert released is not None
    entry = released.status.status.released_nodes[0]
    assert entry.name == NAMES[0] and "PodDisruptionBudget ml/trainer" in entry.message and "60s" in entry.message
    assert NAMES[0] in released.uncordon and NAMES[0] not in c.cordoned
    for _ in range(200):  # the others go on; node-01 is drained again only once no other node waits
        d = c.step(seconds=10)
        if NAMES[0] in d.drain:
            assert c.run.fleet.nodes[NAMES[0]].revision is rollout.Revision.OLD
            assert {n for n, node in c.run.fleet.nodes.items() if node.revision is rollout.Revision.NEW} == set(
                NAMES[1:]
            )
            break
    else:
        raise AssertionError("node-01 was never drained again")
    assert c.most_cordoned <= 2


def test_pause_gives_every_cordoned_node_back_and_drains_nothing_new() -> None:
    c = Cluster(POLICY)
    while not c.cordoned:
        c.step()
    held = set(c.cordoned)
    c.run.pause(True)
    d = c.step()
    assert set(d.uncordon) == held and d.drain == () and c.cordoned == set()
    assert all(c.step().drain == () for _ in range(5))
    c.run.pause(False)
    assert c.until_done().status.phase is Phase.IDLING and c.cordoned == set()


def test_a_node_still_marked_as_cordoned_by_the_rollout_but_not_held_is_given_back() -> None:
    """An operator stopped between cordoning a node and storing the status that holds it: the mark finds it."""
    c = Cluster(POLICY)
    d = c.step()
    while not d.drain:
        d = c.step()
    held = set(d.drain)
    assert rollout_drain.to_uncordon(d, held | {"node-09"}) == ("node-09",)  # held nodes stay cordoned
    assert rollout_drain.to_uncordon(attrs.evolve(d, drain=()), held) == tuple(sorted(held))
