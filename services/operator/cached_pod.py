"""A cached pod: what `informers.slim_pod` keeps of a pod, in one small object read as the pod's mapping.

Why not a dict: at 5,000 nodes the pod cache holds 35,000 pods, and a slimmed pod as nested dicts (the pod and its
metadata) costs more than everything it keeps that is its own (its name; its labels, spec and most statuses are
shared with other pods, `informers._shared`). Six slots cost about a third of those two dicts (tracemalloc, 30,000
pods made from ones recorded on a real kube-apiserver: 713 → 456 bytes a pod). Readers see the
same shape as before — ``pod["metadata"]["name"]``, ``pod["spec"]["nodeName"]``, ``pod.get("status")`` — as a
read-only `Mapping`: the core's pod rules (`metax_core.rollout.fleet`, `metax_core.cluster.gpu_nodes`, …) take
any mapping and cannot tell. ``metadata`` and ``spec`` are built when asked for (a few reads per pod per reconcile;
a dict per node shared by its pods, as before, cost a dict and an entry of the table of shared parts per node).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

_KEYS = ("metadata", "spec", "status")
_NO_EXTRA: Mapping[str, Any] = {}


class CachedPod(Mapping[str, Any]):
    """A pod as the operator's cache keeps it; equal to the dict of the same fields (`Mapping` equality)."""

    __slots__ = ("_extra", "_labels", "_name", "_namespace", "_node", "_status")

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        labels: Mapping[str, Any],
        node: str | None,
        status: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """``extra``: the metadata fields only some pods have (annotations, times), or None (shared empty)."""
        self._name, self._namespace, self._labels = name, namespace, labels
        self._node, self._status = node, status
        self._extra = extra or _NO_EXTRA

    def __getitem__(self, key: str) -> Any:
        if key == "metadata":
            return {"name": self._name, "namespace": self._namespace, "labels": self._labels, **self._extra}
        if key == "spec":
            return {"nodeName": self._node}
        if key == "status":
            return self._status
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """As `Mapping.get`, without its raise and catch of KeyError: the rollout reads each driver pod this way a
        few times per reconcile (5,000 pods at 5,000 nodes)."""
        return self[key] if key in _KEYS else default

    def __contains__(self, key: object) -> bool:
        return key in _KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)

    def __repr__(self) -> str:
        return f"CachedPod({dict(self)!r})"
