"""The fleet snapshot the machine decides on (metax_core.rollout.model.Fleet), and how the machine takes its nodes.

Aspects: the snapshot keeps its nodes in name order whatever order they were gathered in, and indexes them by
name (the index takes no part in equality); a name given twice is refused, naming it; the machine picks the
first idle nodes in name order and reports the busy ones it passed over, whatever the batch (`draft.pick`);
a decision does not depend on the order the nodes were given in.
"""

from __future__ import annotations

import datetime as dt

import pytest

from metax_core.rollout import draft, machine
from metax_core.rollout.model import Fleet, Node, Revision
from metax_core.spec import validation

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def test_the_snapshot_keeps_its_nodes_in_name_order_and_indexed_by_name() -> None:
    fleet = Fleet([Node("n3", Revision.OLD), Node("n1", Revision.NEW), Node("n2", Revision.OLD)], "old", "new")
    assert [n.name for n in fleet.nodes] == ["n1", "n2", "n3"]
    assert fleet.by_name["n1"].revision is Revision.NEW and sorted(fleet.by_name) == ["n1", "n2", "n3"]
    same = Fleet([Node("n1", Revision.NEW), Node("n2", Revision.OLD), Node("n3", Revision.OLD)], "old", "new")
    assert fleet == same and hash(fleet) == hash(same)


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="unique in a fleet snapshot: n2$"):
        Fleet([Node("n2", Revision.OLD), Node("n1", Revision.OLD), Node("n2", Revision.NEW)])


def test_pick_takes_the_first_idle_nodes_and_names_the_busy_ones_passed_over() -> None:
    nodes = [Node(f"n{i}", Revision.OLD, busy=i in (1, 2, 5, 9)) for i in range(10)]
    assert draft.pick(nodes, 3) == (("n0", "n3", "n4"), ("n1", "n2"))
    assert draft.pick(nodes, 4) == (("n0", "n3", "n4", "n6"), ("n1", "n2", "n5"))
    assert draft.pick(iter(nodes), 20) == (("n0", "n3", "n4", "n6", "n7", "n8"), ("n1", "n2", "n5", "n9"))
    assert draft.pick(nodes, 0) == ((), ())
    assert draft.pick([n for n in nodes if n.busy], 2) == ((), ("n1", "n2", "n5", "n9"))


def test_a_decision_does_not_depend_on_the_order_the_nodes_were_gathered_in() -> None:
    policy = validation.parse(
        {
            "registry": "registry.example.com/metax",
            "driver": {
                "payload": {"version": "2.14.6"},
                "upgradePolicy": {"enableRollout": True, "upgradeSteps": [{"replicas": "100%"}], "maxParallel": 2},
            },
        }
    ).driver.upgrade_policy
    nodes = [Node(f"n{i}", Revision.OLD, busy=i == 1) for i in range(6)]
    started = machine.decide(policy, None, Fleet(nodes, "old", "new"), NOW)
    forward = machine.decide(policy, started.status, Fleet(nodes, "old", "new"), NOW)
    backward = machine.decide(policy, started.status, Fleet(nodes[::-1], "old", "new"), NOW)
    assert forward == backward
    assert forward.upgrade == ("n0", "n2") and forward.waiting == ("n1",)
