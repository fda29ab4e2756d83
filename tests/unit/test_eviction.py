"""Which GPU pods a drain evicts and what blocks a node (issue 41 item 3; `metax_core.cluster.eviction`).

The pods are shaped as the API returns them, taken from what Kubernetes' own controllers write: a Deployment's
pod (ownerReferences to its ReplicaSet, controller: true), a DaemonSet's pod, a bare pod, a pod with an emptyDir
(the shape of kubernetes/website's `content/en/examples/pods/storage/redis.yaml`), and a PodDisruptionBudget
with the status the disruption controller writes (`kubernetes/kubernetes` pkg/controller/disruption).
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.cluster import eviction, workloads
from metax_core.spec import model as spec

GPU = {"limits": {"metax-tech.com/gpu": "1"}}


def pod(
    name: str, *, owner: str | None = "ReplicaSet", labels: dict[str, str] | None = None, **spec_extra: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": labels or {"app": "trainer"}}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner", "controller": True}
        ]
    return {
        "metadata": metadata,
        "spec": {"nodeName": "gpu-3", "containers": [{"name": "c", "image": "x", "resources": GPU}], **spec_extra},
        "status": {"phase": "Running"},
    }


def budget(allowed: int, selector: dict[str, Any] | None = None, namespace: str = "ml") -> dict[str, Any]:
    return {
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "minAvailable": 2,
            "selector": selector if selector is not None else {"matchLabels": {"app": "trainer"}},
        },
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 2 + allowed, "desiredHealthy": 2},
    }


DRAIN = spec.Drain(enable=True)


def test_a_deployments_gpu_pod_is_evicted_and_other_pods_are_not_considered() -> None:
    cpu = pod("web")
    cpu["spec"]["containers"][0]["resources"] = {}
    ours = pod("metax-driver-x", labels={workloads.COMPONENT_LABEL: "driver"})
    leaving = pod("old")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-06T23:00:00Z"
    done = pod("finished")
    done["status"]["phase"] = "Succeeded"
    plan = eviction.plan([pod("t-1"), cpu, ours, leaving, done], DRAIN, [])
    assert plan == eviction.NodeEviction(evict=(("ml", "t-1"),), blockers=())


@pytest.mark.parametrize(
    ("the_pod", "drain", "says"),
    [
        (pod("ds", owner="DaemonSet"), DRAIN, "of DaemonSet ds-owner would come back on the node"),
        (pod("bare", owner=None), DRAIN, "has no controller to recreate it (drain.force evicts it)"),
        (
            pod("cache", volumes=[{"name": "data", "emptyDir": {}}]),
            DRAIN,
            "keeps data in emptyDir data (drain.deleteEmptyDir evicts it)",
        ),
        (
            pod("other", labels={"app": "db"}),
            spec.Drain(enable=True, pod_selector={"app": "trainer"}),
            "lacks the labels",
        ),
    ],
)
def test_what_the_drain_may_not_evict_blocks_the_node_and_says_why(
    the_pod: dict[str, Any], drain: spec.Drain, says: str
) -> None:
    plan = eviction.plan([the_pod], drain, [])
    assert plan.evict == () and len(plan.blockers) == 1 and says in plan.blockers[0]
    assert f"ml/{the_pod['metadata']['name']}" in plan.blockers[0]


def test_force_and_delete_empty_dir_let_those_pods_go() -> None:
    bare, cache = pod("bare", owner=None), pod("cache", volumes=[{"name": "data", "emptyDir": {}}])
    plan = eviction.plan([bare, cache], spec.Drain(enable=True, force=True, delete_empty_dir=True), [])
    assert plan.evict == (("ml", "bare"), ("ml", "cache")) and plan.blockers == ()


def test_a_budget_that_allows_no_disruption_is_named_and_the_pod_still_asked_for() -> None:
    plan = eviction.plan([pod("t-1")], DRAIN, [budget(0)])
    assert plan.evict == (("ml", "t-1"),)  # the API server is the authority: it answers 429 while the budget holds
    assert plan.blockers == ("PodDisruptionBudget ml/trainer allows no disruption of pod ml/t-1 now",)
    assert eviction.plan([pod("t-1")], DRAIN, [budget(1)]).blockers == ()
    assert eviction.plan([pod("t-1")], DRAIN, [budget(0, namespace="other")]).blockers == ()


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({}, True),
        ({"matchLabels": {"app": "trainer"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer", "x"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["trainer"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
    ],
)
def test_label_selectors_as_the_api_server_reads_them(selector: dict[str, Any], selected: bool) -> None:
    assert eviction.selects(selector, {"app": "trainer"}) is selected
    assert eviction.selects(None, {"app": "trainer"}) is False


def test_many_blockers_are_counted_not_all_listed() -> None:
    plan = eviction.plan([pod(f"b-{i}", owner=None) for i in range(5)], DRAIN, [])
    assert plan.describe().endswith("; and 2 more") and plan.describe().count("no controller") == 3
