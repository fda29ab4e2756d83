"""What ``metax-operator doctor`` gathers from the cluster, in the core's words, and how raw objects become it.

Why a module of its own: the chain of links (`metax_core.cluster.doctor.chain`) is a pure function of these facts,
so it is tested without a cluster; the CLI only lists objects and hands the raw dicts to the ``*_from_raw``
functions here (pure too: no I/O, they only read the dicts). Every name read here comes from its one owner
(labels from `metax_core.node.labels`, the component label from `metax_core.wire.meta`, Event reasons as the
agents emit them from `metax_core.wire.event_reasons`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.node import driver_config
from metax_core.spec import model as spec
from metax_core.wire import meta


@attrs.frozen
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@attrs.frozen
class NodeFacts:
    name: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    allocatable: Mapping[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    kubelet_ready: bool = True
    kubelet_message: str = ""
    unschedulable: bool = False


@attrs.frozen
class PodFacts:
    """One pod of a component, as its Ready condition and container states say."""

    name: str
    component: str
    """The chart key of its component (the pod's `meta.COMPONENT_LABEL`)."""
    node: str | None
    phase: str = "Pending"
    ready: bool = False
    deleting: bool = False
    waiting_reason: str = ""
    """The first container (init containers first) that waits or terminated with an error: its reason."""
    waiting_message: str = ""
    restarts: int = 0
    ready_message: str = ""
    """The message of the pod's Ready condition (the kubelet's, e.g. ``containers with unready status``)."""


@attrs.frozen
class EventFacts:
    """An Event about the node (agents emit theirs on the Node), newest last after `sorted_events`."""

    reason: str
    message: str
    type: str = "Normal"
    action: str = ""
    """The agent that emitted it (the Events port's ``action``: the component's signal name)."""
    time: str = ""
    """RFC 3339; events sort by it (the strings of one API server compare like the times)."""
    node: str = ""
    """The Node it is about (``regarding.name``)."""

    @property
    def warning(self) -> bool:
        return self.type == "Warning"


@attrs.frozen
class DaemonSetFacts:
    name: str
    node_selector: Mapping[str, str] = attrs.field(factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@attrs.frozen
class CrFacts:
    """cluster-operator: its spec (None when absent or refused, ``problem`` says which) and its conditions."""

    spec: spec.ClusterOperatorSpec | None
    problem: str = ""
    conditions: tuple[tuple[str, str, str, str], ...] = ()
    """(type, status, reason, message) of ``status.conditions``."""
    generation: int = 0
    observed_generation: int = 0
    versions: Mapping[str, str] = attrs.field(factory=dict)
    """``status.versions``: the running operator's release and the release of the CRD's schema (R-UPGRADE)."""


@attrs.frozen
class ClusterFacts:
    """Everything the chain reads that is not about one node."""

    cr: CrFacts
    namespace: str
    daemonsets: Mapping[str, DaemonSetFacts] = attrs.field(factory=dict)
    """By workload name; a rendered DaemonSet missing here is missing in the cluster."""
    driver_config: driver_config.DriverConfig | None = None
    driver_config_problem: str = ""
    rollout_active: bool = False
    """A driver rollout runs (R-ROLLOUT): a node not reached yet runs the previous version by design."""


# --- from the API's raw objects ------------------------------------------------------------------------------


def node_from_raw(raw: Mapping[str, Any]) -> NodeFacts:
    metadata, node_spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return NodeFacts(
        name=str(metadata.get("name", "")),
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple(
            Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in node_spec.get("taints") or []
        ),
        kubelet_ready=ready is not None and ready.get("status") == "True",
        kubelet_message=str((ready or {}).get("message", "no Ready condition")),
        unschedulable=bool(node_spec.get("unschedulable")),
    )


def _waiting(status: Mapping[str, Any]) -> tuple[str, str]:
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = container.get("state") or {}
        if "waiting" in state:
            waiting = state["waiting"] or {}
            return str(waiting.get("reason", "Waiting")), str(waiting.get("message", ""))
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            return str(terminated.get("reason", "Error")), str(terminated.get("message", ""))
    return "", ""


def pod_from_raw(raw: Mapping[str, Any]) -> PodFacts:
    metadata, status = raw.get("metadata") or {}, raw.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    reason, message = _waiting(status)
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
    return PodFacts(
        name=str(metadata.get("name", "")),
        component=str((metadata.get("labels") or {}).get(meta.COMPONENT_LABEL, "")),
        node=(raw.get("spec") or {}).get("nodeName"),
        phase=str(status.get("phase", "Pending")),
        ready=ready is not None and ready.get("status") == "True",
        deleting=bool(metadata.get("deletionTimestamp")),
        waiting_reason=reason,
        waiting_message=message,
        restarts=restarts,
        ready_message=str((ready or {}).get("message", "")),
    )


def event_from_raw(raw: Mapping[str, Any]) -> EventFacts:
    """An ``events.k8s.io/v1`` Event (the API server also serves core Events in this shape)."""
    series = raw.get("series") or {}
    when = series.get("lastObservedTime") or raw.get("eventTime") or raw.get("deprecatedLastTimestamp") or ""
    return EventFacts(
        reason=str(raw.get("reason", "")),
        message=str(raw.get("note", "")),
        type=str(raw.get("type", "Normal")),
        action=str(raw.get("action", "")),
        time=str(when),
        node=str((raw.get("regarding") or {}).get("name", "")),
    )


def sorted_events(events: Sequence[EventFacts]) -> tuple[EventFacts, ...]:
    return tuple(sorted(events, key=lambda e: e.time))


def daemonset_from_raw(raw: Mapping[str, Any]) -> DaemonSetFacts:
    pod = ((raw.get("spec") or {}).get("template") or {}).get("spec") or {}
    return DaemonSetFacts(
        name=str((raw.get("metadata") or {}).get("name", "")),
        node_selector=dict(pod.get("nodeSelector") or {}),
        tolerations=tuple(pod.get("tolerations") or ()),
    )


def conditions_from_raw(status: Mapping[str, Any] | None) -> tuple[tuple[str, str, str, str], ...]:
    return tuple(
        (str(c.get("type", "")), str(c.get("status", "Unknown")), str(c.get("reason", "")), str(c.get("message", "")))
        for c in (status or {}).get("conditions") or []
        if isinstance(c, Mapping)
    )
