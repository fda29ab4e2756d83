"""Which nodes must undo what on the host before the operator deletes anything (R-INSTALL).

Why a rule of the core: whether a node is asked to undo, and by which agents, decides whether a host is left
as it was, so it is decided here from the operator's caches, not in the finalizer that gathers them. A node
is asked when it runs a pod of an agent that has an undo (`metax_core.node.uninstall.AGENTS`); the pod's
component label says which agent (`metax_core.cluster.workloads.COMPONENT_LABEL`, the component's signal
name is the agent's name in the uninstall protocol).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from metax_core import components
from metax_core.cluster import workloads
from metax_core.node import uninstall

_SILENT = frozenset(w.name for info in components.CATALOGUE for w in info.workloads if not w.publishes_readiness)
"""Workloads whose pods answer no uninstall request (gpu-discovery): a node that runs only those has nothing to undo."""


def node_undos(nodes: Iterable[Any], pods: Iterable[Any]) -> list[uninstall.NodeUndo]:
    """Each node that runs a pod of an agent with an undo, with those agents and the node's annotations."""
    agents: dict[str, set[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(workloads.APP_LABEL) in _SILENT:
            continue
        try:
            signal = components.BY_COMPONENT[components.Component(labels.get(workloads.COMPONENT_LABEL, ""))].signal
        except ValueError:
            continue
        if node and signal in uninstall.AGENTS:
            agents.setdefault(str(node), set()).add(signal)
    found = []
    for n in nodes:
        metadata = n.get("metadata") or {}
        name = str(metadata.get("name"))
        if name in agents:
            found.append(uninstall.NodeUndo(name, frozenset(agents[name]), dict(metadata.get("annotations") or {})))
    return found
