"""What the gpu-scheduler extender answers kube-scheduler (C9, docs/scheduler.md), and its wire format.

Why here: the filter and the ranking are decisions on the nodes' published facts (the topology document and
HAMi's scores, both from topo-worker's `placement.best_sets`), and the extender protocol (ExtenderArgs in,
ExtenderFilterResult / HostPriorityList out, ``nodeCacheCapable``: node names only) is a format one process
writes and another reads. The HTTP server and its watch cache are the service's (services/gpu_scheduler).

Free GPUs on a node: the fewer of the document's free set and the allocatable count minus what the pods
bound there request (the document lags a binding until topo-worker's next round; the count does not).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import devices
from metax_core.topology import document, placement

GPU = devices.Resource.GPU.value
MAX_PRIORITY = 10
"""kube-scheduler's MaxExtenderPriority: an extender scores nodes 0–10."""


def _quantity(value: object) -> int:
    """An integer extended-resource quantity (``"4"``, 4); anything else counts as 0."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpus_requested(pod: Mapping[str, Any]) -> int:
    """Whole MetaX GPUs a pod needs: the larger of its containers' sum and its largest init container."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        return _quantity((resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU) or 0)

    running = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(running, init)


@attrs.frozen
class NodeFacts:
    """What the extender knows of one node from its watch cache."""

    allocatable: int = 0
    topology: document.NodeTopology | None = None
    scores: Mapping[int, int] = attrs.field(factory=dict)
    problem: str = ""
    """Why the published topology could not be read (the node is then ranked as one without topology)."""
    published_free: int | None = attrs.field(init=False)
    """How many GPUs the document says are free (None: no document), counted once."""

    @published_free.default
    def _count(self) -> int | None:
        return None if self.topology is None else len(self.topology.free)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeFacts:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        allocatable = _quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
        try:
            text = annotations.get(document.TOPOLOGY)
            topology = None if text is None else document.decode(text)
            scores = placement.decode_counts(annotations.get(document.SCORES) or "{}")
        except InvalidSpec as exc:
            return cls(allocatable, problem=str(exc))
        return cls(allocatable, topology, scores)

    def free(self, used: int) -> int:
        left = max(0, self.allocatable - used)
        return left if self.published_free is None else min(left, self.published_free)


@attrs.frozen
class Verdict:
    passed: tuple[str, ...]
    failed: Mapping[str, str]


def filter_nodes(n: int, names: Iterable[str], facts: Mapping[str, NodeFacts], used: Mapping[str, int]) -> Verdict:
    """Nodes with at least ``n`` free GPUs; the others with the reason kube-scheduler shows on the pod."""
    if n <= 0:
        return Verdict(tuple(names), {})
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        f = facts.get(name)
        if f is None:
            failed[name] = "node not in the gpu-scheduler's cache yet"
        elif (free := f.free(used.get(name, 0))) < n:
            failed[name] = f"{free} free {GPU}, {n} requested"
        else:
            passed.append(name)
    return Verdict(tuple(passed), failed)


def priority(n: int, f: NodeFacts | None) -> int:
    """0–10: the published score of the node's best free ``n``-set (`placement`), tenths rounded down; 0
    without a published topology."""
    if n <= 0 or f is None:
        return 0
    return max(0, min(MAX_PRIORITY, f.scores.get(n, 0) * MAX_PRIORITY // 100))


def prioritize(n: int, names: Iterable[str], facts: Mapping[str, NodeFacts]) -> list[tuple[str, int]]:
    if n <= 0:
        return [(name, 0) for name in names]
    out = []
    for name in names:
        f = facts.get(name)
        score = 0 if f is None else f.scores.get(n, 0) * MAX_PRIORITY // 100
        out.append((name, max(0, min(MAX_PRIORITY, score))))
    return out


# --- the extender protocol (k8s.io/kube-scheduler/extender/v1, JSON) ----------------------------------------


@attrs.frozen
class Args:
    pod: Mapping[str, Any]
    node_names: tuple[str, ...]


def parse_args(body: bytes) -> Args:
    """ExtenderArgs as kube-scheduler sends them with ``nodeCacheCapable: true`` (``NodeNames``)."""
    try:
        raw = json.loads(body)
    except ValueError as exc:
        raise InvalidSpec([FieldError("ExtenderArgs", f"not JSON: {exc}")]) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("Pod"), dict):
        raise InvalidSpec([FieldError("ExtenderArgs.Pod", "must be a Pod object")])
    names = raw.get("NodeNames")
    if names is None:
        names = [(n.get("metadata") or {}).get("name") for n in ((raw.get("Nodes") or {}).get("items") or [])]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidSpec([FieldError("ExtenderArgs.NodeNames", "must be a list of node names")])
    return Args(raw["Pod"], tuple(names))


def render_filter(verdict: Verdict, error: str = "") -> bytes:
    return json.dumps({"NodeNames": list(verdict.passed), "FailedNodes": dict(verdict.failed), "Error": error}).encode()


def render_priorities(ranked: Sequence[tuple[str, int]]) -> bytes:
    return json.dumps([{"Host": name, "Score": score} for name, score in ranked]).encode()


def parse_filter(body: bytes) -> Verdict:
    """ExtenderFilterResult back (tests and the benchmark read the extender's answers with it)."""
    raw = json.loads(body)
    return Verdict(tuple(raw.get("NodeNames") or ()), dict(raw.get("FailedNodes") or {}))


def parse_priorities(body: bytes) -> list[tuple[str, int]]:
    return [(entry["Host"], int(entry["Score"])) for entry in json.loads(body)]


FILTER_PATH = "/filter"
PRIORITIZE_PATH = "/prioritize"
METRICS_PATH = "/metrics"
PORT = 8088
"""The extender's HTTP port (plain HTTP on the pod network; docs/scheduler.md says why)."""
REQUESTS_METRIC = "metax_gpu_scheduler_requests"
"""Counter (``_total``) of the extender's answers by ``verb`` (filter, prioritize) and ``outcome`` (answered,
refused: the request did not parse)."""
FILTERED_OUT_METRIC = "metax_gpu_scheduler_nodes_filtered_out"
"""Counter (``_total``) of nodes the filter verb turned away (too few free GPUs, no topology)."""
DURATION_METRIC = "metax_gpu_scheduler_request_duration_seconds"
"""Histogram of the time from a request read to its answer written, by ``verb``."""


def scheduler_extender(url_prefix: str, *, weight: int = 5, timeout_seconds: int = 5) -> dict[str, Any]:
    """The ``extenders`` entry of a KubeSchedulerConfiguration that wires this extender in: only pods asking
    for MetaX GPUs are sent (``managedResources``), node names only (``nodeCacheCapable``), no bind verb
    (binding stays the scheduler's), and ``ignorable``: the extender down leaves scheduling to the default
    plugins instead of stopping it."""
    return {
        "urlPrefix": url_prefix,
        "filterVerb": FILTER_PATH.lstrip("/"),
        "prioritizeVerb": PRIORITIZE_PATH.lstrip("/"),
        "weight": weight,
        "enableHTTPS": False,
        "nodeCacheCapable": True,
        "ignorable": True,
        "httpTimeout": f"{timeout_seconds}s",
        "managedResources": [{"name": GPU, "ignoredByScheduler": False}],
    }
