"""What a driver rollout's drain needs of the API, on both adapters (issue 41 item 3; `metax_k8s.cordon`,
`Api.evict` and `Objects.evict`): the Eviction API deletes a pod unless a PodDisruptionBudget allows no
disruption now (429, pod kept), and the rollout's cordon takes and gives back only what it cordoned itself.

On the real server the budget's status is the disruption controller's (kube-controller-manager runs in the test
control plane); the in-memory server has none, so the test writes the status that controller writes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from metax_core.errors import ClusterError, NotFound
from metax_core.wire import meta
from metax_k8s import cordon
from tests.support.cluster import Cluster


def _pod(cluster: Cluster, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": {"app": "trainer"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example/trainer:1"}]},
    }
    return cluster.api.create(body)


def _budget_allowing_nothing(cluster: Cluster) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainer", "namespace": cluster.namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
    }
    cluster.api.create(body)
    if cluster.name == "inmemory":  # as the disruption controller writes it for one pod that must stay
        status = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 1, "expectedPods": 1}
        cluster.api.apply({**body, "status": status}, field_manager="disruption-controller", subresource="status")
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = cluster.api.get("policy/v1", "PodDisruptionBudget", "trainer", cluster.namespace)
        if (got.get("status") or {}).get("observedGeneration") == got["metadata"].get("generation"):
            return
        time.sleep(0.2)
    raise AssertionError("the disruption controller never looked at the budget")


def _gone_or_going(cluster: Cluster, name: str) -> bool:
    try:
        return bool(cluster.api.get("v1", "Pod", name, cluster.namespace)["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def test_an_eviction_deletes_the_pod_unless_a_budget_allows_no_disruption(cluster: Cluster) -> None:
    _pod(cluster, "free")
    cluster.api.evict("free", cluster.namespace)
    assert _gone_or_going(cluster, "free")
    _pod(cluster, "held")
    _budget_allowing_nothing(cluster)
    with pytest.raises(ClusterError) as refused:
        cluster.api.evict("held", cluster.namespace)
    assert refused.value.status == 429
    assert not cluster.api.get("v1", "Pod", "held", cluster.namespace)["metadata"].get("deletionTimestamp")
    with pytest.raises(NotFound):
        cluster.api.evict("never-was", cluster.namespace)


def test_the_objects_port_evicts_as_the_eviction_api_does(cluster: Cluster) -> None:
    objects = cluster.objects()
    _pod(cluster, "free")
    objects.evict("free", cluster.namespace)
    assert _gone_or_going(cluster, "free")
    _pod(cluster, "held")
    _budget_allowing_nothing(cluster)
    with pytest.raises(ClusterError) as refused:
        objects.evict("held", cluster.namespace)
    assert refused.value.status == 429  # not retried: the next decision asks again
    assert not cluster.api.get("v1", "Pod", "held", cluster.namespace)["metadata"].get("deletionTimestamp")
    with pytest.raises(NotFound):
        objects.evict("never-was", cluster.namespace)


def test_the_rollout_uncordons_only_what_it_cordoned(cluster: Cluster) -> None:
    mine, theirs = cluster.add_node(labels={"team": "ml"}), cluster.add_node(labels={"team": "ml"})
    cluster.api.merge_patch("v1", "Node", theirs, {"spec": {"unschedulable": True}}, field_manager="kubectl")
    cordons = cordon.Cordons(cluster.api, field_manager="metax-operator")

    def state(name: str) -> tuple[bool, str | None]:
        node = cluster.api.get("v1", "Node", name)
        annotations = node["metadata"].get("annotations") or {}
        return bool((node.get("spec") or {}).get("unschedulable")), annotations.get(meta.ROLLOUT_CORDON)

    assert cordons.cordon(mine, "2026-12-06T23:00:00Z") is True
    assert state(mine) == (True, "2026-12-06T23:00:00Z")
    assert cordons.cordon(mine, "2026-12-06T23:05:00Z") is True  # held already: nothing written
    assert state(mine) == (True, "2026-12-06T23:00:00Z")
    assert cordons.cordon(theirs, "2026-12-06T23:00:00Z") is False  # someone else's cordon: not taken over
    assert cordons.uncordon(theirs) is False and state(theirs) == (True, None)
    assert cordons.uncordon(mine) is True and state(mine) == (False, None)
    assert cordons.uncordon(mine) is False
    assert cordons.cordon("no-such-node", "2026-12-06T23:00:00Z") is False
