"""The pod status a process node writes: phase, conditions and container statuses from its processes' states.

Why a module of its own: controllers read exactly these fields (the Deployment controller counts Ready pods, the
Job controller reads the phase, the EndpointSlice controller reads Ready and the pod IP), so the document is
built in one pure function from plain records and unit-tested.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Sequence
from typing import Any

import attrs


class State(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


@attrs.frozen
class Terminated:
    exit_code: int
    reason: str
    message: str
    started_at: str
    finished_at: str

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"exitCode": self.exit_code, "reason": self.reason, "finishedAt": self.finished_at}
        if self.started_at:
            doc["startedAt"] = self.started_at
        if self.message:
            doc["message"] = self.message
        return doc


@attrs.frozen
class Container:
    """One container's state as the process node saw it last."""

    name: str
    image: str
    state: State
    restart_count: int = 0
    ready: bool = False
    reason: str = ""  # waiting reason
    message: str = ""
    started_at: str = ""  # running since
    terminated: Terminated | None = None  # state TERMINATED: this; otherwise the last termination
    pid: int | None = None
    will_restart: bool = True


class Phase(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


def timestamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase(containers: Sequence[Container]) -> Phase:
    """The kubelet's rule: all terminated for good → Succeeded (every exit 0) or Failed; anything started → Running."""
    if containers and all(c.state is State.TERMINATED and not c.will_restart for c in containers):
        ok = all(c.terminated is not None and c.terminated.exit_code == 0 for c in containers)
        return Phase.SUCCEEDED if ok else Phase.FAILED
    if any(c.state is State.RUNNING or c.restart_count > 0 or c.terminated is not None for c in containers):
        return Phase.RUNNING
    return Phase.PENDING


def _container_document(c: Container) -> dict[str, Any]:
    state: dict[str, Any]
    if c.state is State.RUNNING:
        state = {"running": {"startedAt": c.started_at}}
    elif c.state is State.TERMINATED and c.terminated is not None:
        state = {"terminated": c.terminated.document()}
    else:
        waiting: dict[str, Any] = {"reason": c.reason or "ContainerCreating"}
        if c.message:
            waiting["message"] = c.message
        state = {"waiting": waiting}
    doc: dict[str, Any] = {
        "name": c.name,
        "image": c.image,
        "imageID": "",
        "ready": c.ready,
        "started": c.state is State.RUNNING,
        "restartCount": c.restart_count,
        "state": state,
        "lastState": {},
    }
    if c.pid is not None:
        doc["containerID"] = f"process://{c.pid}"
    if c.terminated is not None and c.state is not State.TERMINATED:
        doc["lastState"] = {"terminated": c.terminated.document()}
    return doc


@attrs.frozen
class PodStatus:
    phase: Phase
    containers: tuple[Container, ...]
    pod_ip: str
    host_ip: str
    start_time: str
    transitions: dict[str, str] = attrs.field(factory=dict)  # condition type -> when its status last changed
    initialized: bool = True  # every init container has completed
    reason: str = ""
    message: str = ""


def conditions(status: PodStatus) -> dict[str, bool]:
    ready = bool(status.containers) and all(c.ready for c in status.containers)
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        ready = False
    return {
        "PodScheduled": True,
        "PodReadyToStartContainers": True,
        "Initialized": status.initialized,
        "ContainersReady": ready,
        "Ready": ready,
    }


def document(status: PodStatus) -> dict[str, Any]:
    """``status`` of the Pod object (for a server-side apply of the status subresource)."""
    doc: dict[str, Any] = {
        "phase": status.phase.value,
        "hostIP": status.host_ip,
        "hostIPs": [{"ip": status.host_ip}],
        "podIP": status.pod_ip,
        "podIPs": [{"ip": status.pod_ip}],
        "startTime": status.start_time,
        "conditions": [
            {
                "type": kind,
                "status": "True" if value else "False",
                "lastProbeTime": None,
                "lastTransitionTime": status.transitions.get(kind, status.start_time),
            }
            for kind, value in conditions(status).items()
        ],
        "containerStatuses": [_container_document(c) for c in status.containers],
    }
    if status.reason:
        doc["reason"] = status.reason
    if status.message:
        doc["message"] = status.message
    return doc
