"""GPU workloads: the pods that keep a driver rollout off their node (R-ROLLOUT).

Why it exists: the rollout never restarts the driver under a running job (001 §3.2.8), so the operator must tell,
from the pods of the whole cluster, which nodes run one. A GPU workload is a pod that is not one of the product's
own (no ``metax-tech.com/component`` label), has not finished, is bound to a node, and holds MetaX devices: it
requests or limits any ``metax-tech.com/*`` extended resource (``gpu``, ``sgpu``, ``vfio-gpu`` and whatever comes
next), or one of its ResourceClaims was allocated devices of the MetaX DRA driver (`dra_claims`, from the claims'
``status.allocation``; issue 41). The operator lists pods page by page with `workload_node` as the transform, so
only the node names of the few that matter are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from metax_core.cluster.workloads import COMPONENT_LABEL
from metax_core.dra import DRIVER
from metax_core.node.labels import PREFIX

Claim = tuple[str, str]
"""A ResourceClaim: (namespace, name)."""

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A container of the pod requests or limits a ``metax-tech.com/*`` resource (init containers end first)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if any(str(name).startswith(PREFIX) for name in resources.get(section) or {}):
                return True
    return False


def dra_claims(claims: Iterable[Mapping[str, Any]]) -> frozenset[Claim]:
    """The ResourceClaims allocated at least one device of the MetaX DRA driver."""
    found = set()
    for claim in claims:
        devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        if any(r.get("driver") == DRIVER for r in devices.get("results") or ()):
            metadata = claim.get("metadata") or {}
            found.add((str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")))
    return frozenset(found)


def pod_claims(pod: Mapping[str, Any]) -> set[Claim]:
    """The ResourceClaims a pod uses: named in its spec, or made for it from a template (its status names them)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    named = [c.get("resourceClaimName") for c in (pod.get("spec") or {}).get("resourceClaims") or ()]
    made = [c.get("resourceClaimName") for c in (pod.get("status") or {}).get("resourceClaimStatuses") or ()]
    return {(namespace, str(name)) for name in (*named, *made) if name}


def holds_devices(pod: Mapping[str, Any], claimed: Collection[Claim] = ()) -> bool:
    """The pod holds MetaX devices: an extended resource, or a claim in ``claimed`` (`dra_claims`)."""
    return requests_gpu(pod) or bool(claimed and pod_claims(pod) & set(claimed))


def workload_node(pod: Mapping[str, Any], claimed: Collection[Claim] = ()) -> dict[str, str] | None:
    """``{"nodeName": node}`` for a GPU workload, None for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    phase = (pod.get("status") or {}).get("phase")
    node = (pod.get("spec") or {}).get("nodeName")
    if node and COMPONENT_LABEL not in labels and phase not in FINISHED_PHASES and holds_devices(pod, claimed):
        return {"nodeName": str(node)}
    return None


def workload_nodes(claimed: Collection[Claim]) -> Callable[[Mapping[str, Any]], dict[str, str] | None]:
    """`workload_node` with ``claimed``, as a list transform."""
    return lambda pod: workload_node(pod, claimed)


def busy_nodes(pods: Iterable[Mapping[str, Any]], claimed: Collection[Claim] = ()) -> set[str]:
    """The nodes that run at least one GPU workload."""
    return {found["nodeName"] for pod in pods if (found := workload_node(pod, claimed)) is not None}
