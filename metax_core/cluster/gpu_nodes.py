"""Which nodes the operator manages as GPU nodes, and which of them it counts ready (``status.readyNodes`` /
``status.totalNodes``, docs/operator.md).

Why a module of its own: the two numbers are what ``kubectl get clusteroperator`` shows first, and the GPU
node set also bounds the driver rollout (`metax_core.rollout.fleet.snapshot`), so the rule is the core's, not
a detail of the reconciler's loop over its caches (issue 43 item 5). Pure: nodes and pods arrive as the
operator's cached dicts.

- a GPU node is one labelled ``metax-tech.com/gpu.installed=true`` (by gpu-label, or by hand), the label the
  components' DaemonSets select on;
- a GPU node counts ready when every one of the operator's pods on it is Ready, and there is one: every enabled
  component works there, as the CRD's description of ``readyNodes`` says (`readiness_on_node`; the pod cache holds
  the components' pods only, as `services.operator.informers.slim_pod` keeps them: ``status.ready``). One pod
  not Ready — starting, crash-looping, its driver being upgraded — and the node is not counted.
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


def readiness_on_node(pod: Obj) -> tuple[str, bool] | None:
    """(the node, whether Ready) of one of the operator's pods bound to a node, or None (not scheduled yet).

    The operator's pod cache tallies its pods by this (`services.operator.caches`), so a reconcile counts ready
    nodes without a pass over every cached pod (40,000 at 5,000 nodes)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return (str(node), bool((pod.get("status") or {}).get("ready"))) if node else None


def ready_count(gpu_nodes: Iterable[str], seen: Container[tuple[str, bool]]) -> int:
    """How many of ``gpu_nodes`` are ready: ``seen`` holds (node, True) and not (node, False), where ``seen`` is
    every pair `readiness_on_node` gives some pod of ours."""
    return sum(1 for n in gpu_nodes if (n, True) in seen and (n, False) not in seen)
