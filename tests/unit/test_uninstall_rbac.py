"""The uninstall protocol needs no new permission for the agents, and one for the operator (R-INSTALL, R-SECURITY).

Covers: every agent with an undo reads and patches Nodes (the request and its answer are annotations on its
own Node) and has nothing on the ClusterOperator or on Leases; the operator may delete its own leader Lease
and no other.
"""

from __future__ import annotations

import pytest

from metax_core import components
from metax_core.cluster import rbac
from metax_core.node import uninstall

BY_SIGNAL = {info.signal: info.component for info in components.CATALOGUE}


@pytest.mark.parametrize("agent", uninstall.AGENTS)
def test_an_agent_answers_with_what_it_already_may_do(agent: str) -> None:
    [account] = [
        w.service_account
        for w in components.BY_COMPONENT[BY_SIGNAL[agent]].workloads
        if w.publishes_readiness and w.service_account
    ]
    rules = rbac.component_rules(account)
    node_verbs = {v for r in rules.cluster if "nodes" in r.resources and not r.names for v in r.verbs}
    assert {"get", "patch"} <= node_verbs
    every = [*rules.cluster, *rules.namespace, *rules.events]
    assert not [r for r in every if {"clusteroperators", "leases"} & set(r.resources)]


def test_the_operator_may_delete_its_own_lease_only() -> None:
    deletes = [r for r in rbac.operator_rules().namespace if "leases" in r.resources and "delete" in r.verbs]
    assert [r.names for r in deletes] == [(rbac.OPERATOR_LEASE,)]
