"""The kwok-simulated nodes of the test control plane: their Node objects, creation, readiness.

Why this module exists: there are no kubelets. kwok manages the Node objects the launcher creates
(those carrying its annotation), keeps their Ready condition and leases fresh and marks the pods
bound to them Running. This module says how such a Node is labelled, annotated and sized, so that
kwok picks it up and tests can tell the simulated nodes apart from anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from metax_dev.controlplane import errors, network

#: Annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE: Final = "fake"
#: Label every node created here carries, to tell them apart from anything else.
KWOK_NODE_LABEL: Final = "type"
KWOK_NODE_LABEL_VALUE: Final = "kwok"


def manifest(name: str, *, cpu: str, memory: str, pods: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Node object created for a kwok node: kwok annotation, labels, resources."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    all_labels = {
        KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        **labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {},
        "status": {
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node object (as JSON) has the condition Ready=True."""
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def next_names(prefix: str, count: int, existing: set[str]) -> list[str]:
    """``count`` names ``<prefix>-<i>`` for new nodes: the lowest free numbers."""
    names: list[str] = []
    index = 0
    while len(names) < count:
        candidate = f"{prefix}-{index}"
        if candidate not in existing:
            names.append(candidate)
        index += 1
    return names


def create(http: network.Https, manifests: Sequence[Mapping[str, Any]]) -> None:
    """Create the Node objects, up to 8 at a time; one that exists already is fine."""

    def post(manifest: Mapping[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        status, data = http.request("POST", "/api/v1/nodes", manifest)
        if status not in (200, 201, 409):
            raise errors.ControlPlaneError(f"creating node {name}: HTTP {status}: {data[:300]!r}")

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(manifests)))) as pool:
        list(pool.map(post, manifests))


def ready_names(http: network.Https) -> set[str]:
    """The names of the kwok nodes (by our label) that are Ready now."""
    selector = f"{KWOK_NODE_LABEL}%3D{KWOK_NODE_LABEL_VALUE}"
    listing = http.json("GET", f"/api/v1/nodes?labelSelector={selector}")
    return {n["metadata"]["name"] for n in listing.get("items", []) if ready(n)}
