"""Which nodes the operator manages as GPU nodes, and which of them it counts ready (``status.readyNodes`` /
``status.totalNodes``, docs/operator.md).

Why a module of its own: the two numbers are what ``kubectl get clusteroperator`` shows first, and the GPU
node set also bounds the driver rollout (`metax_core.rollout.fleet.snapshot`), so the rule is the core's, not
a detail of the reconciler's loop over its caches (issue 43 item 5). Pure: nodes and pods arrive as the
operator's cached dicts.

- a GPU node is one labelled ``metax-tech.com/gpu.installed=true`` (by gpu-label, or by hand), the label the
  components' DaemonSets select on;
- a GPU node counts ready when at least one of the operator's pods on it is Ready (`ready_node`; the pod cache
  holds the components' pods only, as `services.operator.informers.slim_pod` keeps them: ``status.ready``).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from metax_core.node import labels as node_labels

Obj = Mapping[str, Any]


def is_gpu_node(node: Obj) -> bool:
    return ((node.get("metadata") or {}).get("labels") or {}).get(node_labels.GPU_INSTALLED) == node_labels.TRUE


def names(nodes: Iterable[Obj]) -> list[str]:
    """The GPU nodes among ``nodes``, by name."""
    return sorted(str(n["metadata"]["name"]) for n in nodes if is_gpu_node(n))


def ready_node(pod: Obj) -> str | None:
    """The node ``pod`` makes ready (one of the operator's pods, Ready, on a node), or None.

    The operator's pod cache tallies its pods by this (`services.operator.caches`), so a reconcile counts ready
    nodes without a pass over every cached pod (35,000 at 5,000 nodes)."""
    if not (pod.get("status") or {}).get("ready"):
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def ready_count(gpu_nodes: Iterable[str], ready_nodes: Container[str]) -> int:
    """How many of ``gpu_nodes`` are among ``ready_nodes`` (the nodes `ready_node` names for some pod)."""
    return sum(1 for n in gpu_nodes if n in ready_nodes)
