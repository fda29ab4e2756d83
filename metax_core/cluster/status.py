"""The ClusterOperator's status: each component's observed state, rolled up into conditions (C1, R-DEP).

Why a module of its own: the roll-up is the operator's answer to "is my installation working?", so it is a
pure function with one rule set, in the gpu-operator shape: every component state reports a `ComponentResult`
(desired objects applied, readiness observed from its DaemonSet or Deployment status); `roll_up` turns the
list into ``status.components[]`` and the three API-convention conditions:

- ``Ready``: True when the spec is valid and every deployable component is ready;
- ``Progressing``: True while a component converges (pods being created or updated) or a driver rollout runs;
- ``Degraded``: True when the spec is invalid (message lists the field paths), a component is blocked by a
  disabled prerequisite, an apply failed, or a component's pods fail.

A condition's ``lastTransitionTime`` changes only when its status changes, so reconciling an unchanged
cluster gives a byte-identical status, and the operator writes nothing (zero writes in steady state).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import components, wording
from metax_core.components import Component
from metax_core.errors import InvalidSpec
from metax_core.rollout import status as rollout_status


class State(enum.Enum):
    """Where one component is (``status.components[].state``)."""

    DISABLED = "Disabled"
    BLOCKED = "Blocked"
    """Enabled, but a prerequisite is disabled or blocked (R-DEP): nothing is deployed."""
    DEPLOYING = "Deploying"
    """Applied; pods are being created, updated or becoming ready."""
    READY = "Ready"
    FAILED = "Failed"
    """The apply was refused, or pods of the component fail."""


@attrs.frozen
class ComponentResult:
    """One component state's outcome in one reconcile."""

    component: Component
    enabled: bool
    state: State
    desired: int = 0
    ready: int = 0
    updated: int = 0
    message: str = ""


@attrs.frozen
class Condition:
    type: str
    status: str
    """"True", "False" or "Unknown"."""
    reason: str
    message: str
    last_transition_time: dt.datetime
    observed_generation: int = 0


READY, PROGRESSING, DEGRADED = "Ready", "Progressing", "Degraded"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED)


@attrs.frozen
class ClusterStatus:
    observed_generation: int
    phase: str
    conditions: tuple[Condition, ...]
    components: tuple[ComponentResult, ...]
    ready_nodes: int = 0
    total_nodes: int = 0


# --- observing a workload ------------------------------------------------------------------------------------


def _int(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def observe(
    component: Component, workloads: Sequence[Mapping[str, Any] | None], *, rolling_update: bool = True
) -> ComponentResult:
    """A deployed component's state from its live workloads (None: not created yet).

    A DaemonSet that wants no pods counts as ready (no GPU node yet is not a fault). ``rolling_update`` False
    (the driver, `OnDelete`): pods on the old template still count as ready; the rollout reports them.
    """
    desired = ready = updated = 0
    converging: list[str] = []
    for workload in workloads:
        if workload is None:
            return ComponentResult(component, True, State.DEPLOYING, message="waiting for its workloads to be created")
        name = str((workload.get("metadata") or {}).get("name", ""))
        generation = _int(workload.get("metadata") or {}, "generation")
        st = workload.get("status") or {}
        if workload.get("kind") == "Deployment":
            want, have, fresh = (
                _int(workload.get("spec") or {}, "replicas"),
                _int(st, "readyReplicas"),
                _int(st, "updatedReplicas"),
            )
        else:
            want, have, fresh = (
                _int(st, "desiredNumberScheduled"),
                _int(st, "numberReady"),
                _int(st, "updatedNumberScheduled"),
            )
        desired, ready, updated = desired + want, ready + have, updated + fresh
        seen = _int(st, "observedGeneration") >= generation
        if not seen or have < want or (rolling_update and fresh < want):
            converging.append(f"{name} {have}/{want} ready" + ("" if seen else ", change not yet observed"))
    if converging:
        return ComponentResult(component, True, State.DEPLOYING, desired, ready, updated, "; ".join(converging))
    return ComponentResult(component, True, State.READY, desired, ready, updated, f"{ready}/{desired} pods ready")


def disabled(component: Component) -> ComponentResult:
    return ComponentResult(component, False, State.DISABLED, message="deploy is false")


def blocked(b: components.Blocked) -> ComponentResult:
    return ComponentResult(b.component, True, State.BLOCKED, message=b.reason)


def failed(component: Component, message: str) -> ComponentResult:
    return ComponentResult(component, True, State.FAILED, message=message)


# --- the roll-up ---------------------------------------------------------------------------------------------


def _transition(
    previous: Mapping[str, Condition], kind: str, status: str, reason: str, message: str, now: dt.datetime, gen: int
) -> Condition:
    old = previous.get(kind)
    since = old.last_transition_time if old is not None and old.status == status else now
    return Condition(kind, status, reason, message, since, gen)


def _names(results: Sequence[ComponentResult]) -> str:
    return ", ".join(r.component.value for r in results)


def roll_up(
    *,
    generation: int,
    results: Sequence[ComponentResult],
    previous: Sequence[Condition],
    now: dt.datetime,
    invalid: InvalidSpec | None = None,
    crd_outdated: str = "",
    rollout: rollout_status.UpgradeStatus | None = None,
    ready_nodes: int = 0,
    total_nodes: int = 0,
) -> ClusterStatus:
    """The whole status from this reconcile's component results (and the last stored conditions)."""
    before = {c.type: c for c in previous}
    by_state: dict[State, list[ComponentResult]] = {s: [] for s in State}
    for r in results:
        by_state[r.state].append(r)
    rolling = rollout is not None and rollout.upgrading

    degraded: tuple[str, str, str]
    if crd_outdated:
        degraded = ("True", "CRDOutdated", crd_outdated)
    elif invalid is not None:
        paths = "; ".join(f"{e.path or '(spec)'}: {e.message}" for e in invalid.errors)
        degraded = ("True", "InvalidSpec", f"the spec is invalid, nothing was changed: {paths}")
    elif by_state[State.FAILED]:
        detail = "; ".join(f"{r.component.value}: {r.message}" for r in by_state[State.FAILED])
        degraded = ("True", "ComponentFailed", detail)
    elif by_state[State.BLOCKED]:
        detail = "; ".join(r.message for r in by_state[State.BLOCKED])
        degraded = ("True", "PrerequisiteDisabled", detail)
    else:
        degraded = ("False", "AsExpected", "no component is failed or blocked")

    if by_state[State.DEPLOYING]:
        detail = "; ".join(f"{r.component.value}: {r.message}" for r in by_state[State.DEPLOYING])
        progressing = ("True", "Deploying", detail)
    elif rolling and rollout is not None:
        progressing = ("True", "DriverRollout", rollout.message or "a driver rollout is running")
    else:
        progressing = ("False", "Converged", "every deployed component has converged")

    if crd_outdated:
        ready = ("False", "CRDOutdated", "the CRD is older than the operator; see the Degraded condition")
    elif invalid is not None:
        ready = ("False", "InvalidSpec", "the spec is invalid; see the Degraded condition")
    elif by_state[State.FAILED] or by_state[State.DEPLOYING]:
        waiting = by_state[State.FAILED] + by_state[State.DEPLOYING]
        ready = ("False", "ComponentsNotReady", f"not ready: {_names(waiting)}")
    else:
        up = by_state[State.READY]
        ready = ("True", "AllComponentsReady", f"ready: {_names(up)}" if up else "no component is enabled")

    conditions = tuple(
        _transition(before, kind, *value, now, generation)
        for kind, value in ((READY, ready), (PROGRESSING, progressing), (DEGRADED, degraded))
    )
    if crd_outdated:
        phase = "Degraded"
    elif invalid is not None:
        phase = "Invalid"
    elif ready[0] == "True":
        phase = "Degraded" if degraded[0] == "True" else "Ready"
    elif by_state[State.FAILED]:
        phase = "Degraded"
    else:
        phase = "Progressing"
    order = {c: i for i, c in enumerate(components.deploy_order(Component))}
    listed = tuple(sorted(results, key=lambda r: order[r.component]))
    return ClusterStatus(generation, phase, conditions, listed, ready_nodes, total_nodes)


# --- document form -------------------------------------------------------------------------------------------


def condition_document(c: Condition) -> dict[str, Any]:
    return {
        "type": c.type,
        "status": c.status,
        "observedGeneration": c.observed_generation,
        "lastTransitionTime": rollout_status.format_time(c.last_transition_time),
        "reason": c.reason,
        "message": wording.at_most(c.message, wording.CONDITION_MESSAGE_LIMIT),
    }


def to_document(s: ClusterStatus) -> dict[str, Any]:
    """``status`` minus ``upgradeStatus`` (the rollout machine's own document)."""
    return {
        "observedGeneration": s.observed_generation,
        "phase": s.phase,
        "readyNodes": s.ready_nodes,
        "totalNodes": s.total_nodes,
        "conditions": [condition_document(c) for c in s.conditions],
        "components": [
            {
                "name": r.component.value,
                "enabled": r.enabled,
                "state": r.state.value,
                "desired": r.desired,
                "ready": r.ready,
                "updated": r.updated,
                "message": r.message,
            }
            for r in s.components
        ],
    }


def conditions_from_document(status: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """The stored conditions (only what `roll_up` needs: type, status, time); unreadable entries are dropped."""
    result = []
    for doc in (status or {}).get("conditions") or []:
        if not isinstance(doc, Mapping) or doc.get("type") not in CONDITION_TYPES:
            continue
        try:
            since = rollout_status.parse_time(str(doc.get("lastTransitionTime", "")))
        except ValueError:
            continue
        result.append(
            Condition(
                str(doc["type"]),
                str(doc.get("status", "Unknown")),
                str(doc.get("reason", "")),
                str(doc.get("message", "")),
                since,
                _int(doc, "observedGeneration"),
            )
        )
    return tuple(result)
