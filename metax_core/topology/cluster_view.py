"""The cluster view of GPU topology: one ConfigMap that topo-master rebuilds from every Node (C7).

Why: an administrator (or a tool) sees every node's GPUs, free GPUs and best-set scores in one object
instead of reading each Node's annotations, and inconsistent nodes are named once, as Events. The
gpu-scheduler extender does not read it (it keeps its own watch cache of the Nodes, docs/scheduler.md).
Format owner for ConfigMap `NAME`, key `KEY` (writer: topo-master; reader: `decode`, tests, the doctor).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core.node import labels
from metax_core.topology import document, extender
from metax_core.wire import meta

NAME = meta.TOPOLOGY_VIEW_MAP
KEY = "nodes.json"
MAX_BYTES = 900 * 1024
"""Below the API server's 1 MiB per object: past it the per-count scores are left out (counts stay)."""


@attrs.frozen
class NodeEntry:
    gpus: int
    free: int
    scores: Mapping[int, int] = attrs.field(factory=dict)


@attrs.frozen
class Problem:
    node: str
    reason: str
    """`metax_core.wire.event_reasons.TOPOLOGY_UNREADABLE` or ``TOPOLOGY_INCONSISTENT``."""
    message: str


@attrs.frozen
class View:
    nodes: Mapping[str, NodeEntry]
    problems: tuple[Problem, ...] = ()


def build(nodes: Mapping[str, Mapping[str, Any]], *, unreadable: str, inconsistent: str) -> View:
    """The view of every Node carrying a topology document; ``unreadable`` / ``inconsistent`` are the Event
    reasons to report problems with (the caller's `event_reasons`)."""
    entries: dict[str, NodeEntry] = {}
    problems: list[Problem] = []
    for name in sorted(nodes):
        node = nodes[name]
        meta = node.get("metadata") or {}
        if document.TOPOLOGY not in (meta.get("annotations") or {}):
            continue
        facts = extender.NodeFacts.of(node)
        if facts.problem or facts.topology is None:
            problems.append(Problem(name, unreadable, facts.problem or "no document"))
            continue
        doc = facts.topology
        entries[name] = NodeEntry(len(doc.gpus), len(doc.free), dict(facts.scores))
        counted = (meta.get("labels") or {}).get(labels.GPU_COUNT)
        if counted is not None and counted.isdigit() and int(counted) != len(doc.gpus):
            problems.append(
                Problem(
                    name,
                    inconsistent,
                    f"the topology document lists {len(doc.gpus)} GPUs, {labels.GPU_COUNT} says {counted}",
                )
            )
        status = node.get("status") or {}
        if extender.GPU in (status.get("allocatable") or {}) and facts.allocatable > len(doc.gpus):
            problems.append(
                Problem(
                    name,
                    inconsistent,
                    f"{facts.allocatable} {extender.GPU} allocatable, {len(doc.gpus)} GPUs in the topology document",
                )
            )
    return View(entries, tuple(problems))


def encode(view: View) -> str:
    """Compact, key-sorted JSON; without the scores when that is too large (``"scores": "omitted"``)."""

    def render(with_scores: bool) -> str:
        nodes = {
            name: {
                "gpus": e.gpus,
                "free": e.free,
                **({"scores": {str(k): v for k, v in sorted(e.scores.items())}} if with_scores else {}),
            }
            for name, e in view.nodes.items()
        }
        body: dict[str, Any] = {"version": 1, "nodes": nodes}
        if not with_scores:
            body["scores"] = "omitted"
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    text = render(True)
    return text if len(text) <= MAX_BYTES else render(False)


def decode(text: str) -> dict[str, NodeEntry]:
    raw = json.loads(text)
    return {
        name: NodeEntry(int(e["gpus"]), int(e["free"]), {int(k): int(v) for k, v in (e.get("scores") or {}).items()})
        for name, e in raw["nodes"].items()
    }


def config_map(view: View, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": namespace},
        "data": {KEY: encode(view)},
    }
