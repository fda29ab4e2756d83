"""GPU workloads: the pods that keep a driver rollout off their node (R-ROLLOUT).

Why it exists: the rollout never restarts the driver under a running job (001 §3.2.8), so the operator must tell,
from the pods of the whole cluster, which nodes run one. A GPU workload is a pod that is not one of the product's
own (no ``metax-tech.com/component`` label), has not finished, is bound to a node, and requests or limits any
``metax-tech.com/*`` extended resource (``gpu``, ``sgpu``, ``vfio-gpu`` and whatever comes next). The operator lists
pods page by page with `workload_node` as the transform, so only the node names of the few that matter are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from metax_core.cluster.workloads import COMPONENT_LABEL
from metax_core.node.labels import PREFIX

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """A container of the pod requests or limits a ``metax-tech.com/*`` resource (init containers end first)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if any(str(name).startswith(PREFIX) for name in resources.get(section) or {}):
                return True
    return False


def workload_node(pod: Mapping[str, Any]) -> dict[str, str] | None:
    """``{"nodeName": node}`` for a GPU workload, None for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    phase = (pod.get("status") or {}).get("phase")
    node = (pod.get("spec") or {}).get("nodeName")
    if node and COMPONENT_LABEL not in labels and phase not in FINISHED_PHASES and requests_gpu(pod):
        return {"nodeName": str(node)}
    return None


def busy_nodes(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The nodes that run at least one GPU workload."""
    return {found["nodeName"] for pod in pods if (found := workload_node(pod)) is not None}
