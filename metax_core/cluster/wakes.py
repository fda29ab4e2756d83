"""Which watched changes make the operator reconcile, and when (its informers' filters, one owner).

Why: the reconcile is level-triggered and reads everything, so a change only has to say whether it is worth a
reconcile at all, and whether at once. A Node matters only through the product's labels, the uninstall
protocol's keys, or coming and going (not its heartbeats). A change that only reports progress (a status, the
server's bookkeeping) can wait for the operator's progress pace and coalesce with the rest of its burst; a change
to what the operator wants or owns (spec, labels, creation, deletion) cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.health import report
from metax_core.node import uninstall
from metax_core.node.labels import PREFIX
from metax_core.ports.cluster import RawObject


def progress_only(old: RawObject | None, new: RawObject | None) -> bool:
    """True when an object that existed before and after changed only in what it reports (``status``, and the
    server's bookkeeping): a workload's progress, not a change to what the operator wants or owns."""
    if old is None or new is None:
        return False
    return _wanted(old) == _wanted(new)


def _wanted(obj: RawObject) -> RawObject:
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


PACE_FACTOR = 5.0
"""Progress waits at least this many times as long as the last reconcile took (`progress_delay`)."""
MAX_PROGRESS_DELAY = 15.0
"""The longest progress waits, however slow the last reconcile was."""


def progress_delay(pace: float, last_reconcile: float) -> float:
    """How long a change that only reports progress waits before its reconcile: the operator's pace, or
    `PACE_FACTOR` times what the last reconcile took, whichever is longer, up to `MAX_PROGRESS_DELAY`.

    Why: each reconcile reads every pod and node the operator caches and writes the status when it moved, so at
    1,000 nodes a reconcile a second during an install kept the operator busy most of the time and the API
    server answering its status writes, while the fleet's own pods waited for the same 2 cores (issue 26, P1).
    Tied to the reconcile's own duration, reporting progress takes at most about a sixth of the operator's time
    on any fleet and backs off when the API server is slow; a change to what the operator wants or owns never
    waits for it."""
    return max(pace, min(MAX_PROGRESS_DELAY, PACE_FACTOR * last_reconcile))


def node_matters(old: RawObject | None, new: RawObject | None) -> bool:
    """Whether a Node's change is worth a reconcile: it came or went, or its product labels, uninstall keys, GPU
    health report or ``MetaXGPUHealthy`` condition changed."""
    return (
        (old is None) != (new is None)
        or gpu_labels(old) != gpu_labels(new)
        or uninstall_keys(old) != uninstall_keys(new)
        or health_keys(old) != health_keys(new)
    )


def health_keys(node: Mapping[str, Any] | None) -> tuple[object, object]:
    """The node's GPU health report and its condition (`metax_core.health.report`)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    condition = report.node_condition(node)
    shown = None if condition is None else (condition.get("status"), condition.get("reason"), condition.get("message"))
    return annotations.get(report.ANNOTATION), shown


def gpu_labels(node: Mapping[str, Any] | None) -> dict[str, str]:
    """The labels that matter to the operator: the product's own (metax-tech.com/...)."""
    if node is None:
        return {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith(PREFIX)}


def uninstall_keys(node: Mapping[str, Any] | None) -> dict[str, str]:
    """The uninstall request and the agents' answers on a node (`metax_core.node.uninstall`): the finalizer
    waits for them, so their changes wake the reconciler."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if uninstall.is_protocol_key(k)}
