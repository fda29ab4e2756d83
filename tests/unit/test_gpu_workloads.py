"""GPU workloads keep the driver rollout off their node (R-ROLLOUT, 001 §3.2.8): which pods count."""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.cluster import gpu_workloads
from metax_core.cluster.workloads import COMPONENT_LABEL


def pod(
    node: str | None = "gpu-1",
    *,
    resources: dict[str, Any] | None = None,
    init_resources: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "sidecar"}, {"name": "main", "resources": resources or {}}]}
    if node is not None:
        spec["nodeName"] = node
    if init_resources is not None:
        spec["initContainers"] = [{"name": "init", "resources": init_resources}]
    return {"metadata": {"name": "p", "labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"metax-tech.com/gpu": "1"}},
        {"requests": {"metax-tech.com/sgpu": "2"}},
        {"limits": {"metax-tech.com/vfio-gpu": "1"}},
        {"requests": {"cpu": "1"}, "limits": {"metax-tech.com/some-future-resource": "1"}},
    ],
)
def test_a_pod_requesting_any_product_resource_in_any_container_is_a_gpu_workload(resources: dict[str, Any]) -> None:
    assert gpu_workloads.workload_node(pod(resources=resources)) == {"nodeName": "gpu-1"}


@pytest.mark.parametrize(
    ("why", "candidate"),
    [
        ("no product resource", pod(resources={"limits": {"cpu": "2", "nvidia.com/gpu": "1"}})),
        (
            "only its init container asked (it has finished)",
            pod(init_resources={"limits": {"metax-tech.com/gpu": "1"}}),
        ),
        (
            "one of the product's own pods",
            pod(resources={"limits": {"metax-tech.com/gpu": "1"}}, labels={COMPONENT_LABEL: "driver"}),
        ),
        ("finished", pod(resources={"limits": {"metax-tech.com/gpu": "1"}}, phase="Succeeded")),
        ("failed", pod(resources={"limits": {"metax-tech.com/gpu": "1"}}, phase="Failed")),
        ("not bound to a node yet", pod(None, resources={"limits": {"metax-tech.com/gpu": "1"}})),
    ],
)
def test_other_pods_are_not(why: str, candidate: dict[str, Any]) -> None:
    assert gpu_workloads.workload_node(candidate) is None, why


def test_a_pending_pod_already_bound_counts_and_a_pod_without_a_spec_does_not() -> None:
    assert gpu_workloads.workload_node(pod(resources={"requests": {"metax-tech.com/gpu": "1"}}, phase="Pending"))
    assert gpu_workloads.workload_node({"metadata": {"name": "bare"}}) is None


def test_busy_nodes_are_the_nodes_of_gpu_workloads_once_each() -> None:
    gpu = {"limits": {"metax-tech.com/gpu": "1"}}
    pods = [
        pod("gpu-1", resources=gpu),
        pod("gpu-1", resources=gpu),
        pod("gpu-2", resources={"limits": {"cpu": "1"}}),
        pod("gpu-3", resources=gpu, labels={COMPONENT_LABEL: "gpu-device"}),
        pod("gpu-4", resources=gpu, labels={"app": "train"}),
    ]
    assert gpu_workloads.busy_nodes(pods) == {"gpu-1", "gpu-4"}


def claim(name: str, driver: str, namespace: str = "ml") -> dict[str, Any]:
    """A ResourceClaim as the scheduler leaves it allocated (resource.k8s.io/v1 ``status.allocation``)."""
    result = {"request": "gpus", "driver": driver, "pool": "gpu-1", "device": "gpu-0"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_a_pod_holding_metax_devices_through_a_dra_claim_is_a_gpu_workload() -> None:
    """Issue 41: the DRA driver's devices keep the rollout off the node (and a drain evicts them) like the
    device plugin's. A pod names its claim in its spec, or the claim made from its template in its status."""
    claimed = gpu_workloads.dra_claims(
        [claim("trainer-gpus-x7k2p", "gpu.metax-tech.com"), claim("other-gpus", "gpu.nvidia.com"), {"metadata": {}}]
    )
    assert claimed == {("ml", "trainer-gpus-x7k2p")}
    from_template = pod()
    from_template["metadata"]["namespace"] = "ml"
    from_template["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "trainer-gpus"}]
    from_template["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "trainer-gpus-x7k2p"}]
    named = pod()
    named["metadata"]["namespace"] = "ml"
    named["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "other-gpus"}]
    assert gpu_workloads.workload_node(from_template, claimed) == {"nodeName": "gpu-1"}
    assert gpu_workloads.workload_node(from_template) is None  # without the claims, nothing says it holds ours
    assert gpu_workloads.workload_node(named, claimed) is None  # another driver's devices
    assert gpu_workloads.busy_nodes([from_template, named], claimed) == {"gpu-1"}
