"""The driver rollout's status (``status.upgradeStatus``, 001 Table 3.16) as records, and its document form.

Why a module of its own: the status is the rollout machine's only memory. The operator stores it in the
ClusterOperator's status subresource and hands it back to `metax_core.rollout.machine.decide` on the next reconcile,
so the records must survive the round trip exactly (`to_document` / `from_document`), and an administrator
reads the same document with ``kubectl get``. Keys are Table 3.16's, camelCase; times are RFC 3339 in UTC.

Two deliberate differences from the table, both documented in docs/rollout.md:

- the condition list is ``conditions`` (the Kubernetes convention the SPEC uses); a stored ``condition`` list
  (the table's spelling) is read as well;
- ``status.currentStepNodes`` and ``status.pendingRetryNodes`` are extensions: the nodes the current step
  (or rollback) has upgraded, and the failed nodes a retry round still has to restart. Without them a step
  could not tell its own failures from those an earlier step tolerated.

`to_document` leaves out fields that are unset (``recheckTime`` when no timed pause is running), so the
operator replaces ``/status/upgradeStatus`` as a whole (JSON patch ``replace``) instead of merging into it.
`from_document` ignores unknown keys (a status written by a newer operator stays readable) but refuses a
known key with a value of the wrong kind, naming its path.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from metax_core.errors import FieldError, InvalidSpec

E = TypeVar("E", bound=enum.Enum)


class Phase(enum.Enum):
    """Where the rollout as a whole is (Table 3.16 ``phase``)."""

    IDLING = "Idling"
    """No rollout is running: nothing to upgrade, the last one completed, or a fallback rolled it back."""
    PROGRESSING = "Progressing"
    """A rollout is running, possibly paused (between steps, by the administrator or by the fallback)."""
    TERMINATING = "Terminating"
    """The fallback is rolling every upgraded node back to lastAppliedSpec."""
    DISABLED = "Disabled"
    """enableRollout is false and no rollback is running."""
    DISABLING = "Disabling"
    """enableRollout was set to false during a rollout: every upgraded node is being rolled back."""


ACTIVE_PHASES = frozenset({Phase.PROGRESSING, Phase.TERMINATING, Phase.DISABLING})
"""Phases in which a rollout (or its rollback) owns the driver pods; ``upgrading`` is true exactly then."""


class StepState(enum.Enum):
    """Where the current step is (Table 3.16 ``status.currentStepState``)."""

    STEP_UPGRADE_INIT = "StepUpgradeInit"
    """The step has begun; none of its nodes has been started yet."""
    STEP_UPGRADE = "StepUpgrade"
    """Nodes of the step are being upgraded (or rolled back), loop by loop."""
    STEP_PAUSED = "StepPaused"
    """The step is done and waits: for pauseDuration, for an administrator, or after the fallback paused."""
    STEP_READY = "StepReady"
    """The step is done and its pause is over; the next decision begins the next step (or completes)."""
    COMPLETED = "Completed"
    """The rollout (or its rollback) has finished."""


class ConditionType(enum.Enum):
    PROGRESSING = "Progressing"
    SUCCEED = "Succeed"
    FAILED = "Failed"
    TERMINATING = "Terminating"


CONDITION_ORDER = (ConditionType.PROGRESSING, ConditionType.SUCCEED, ConditionType.FAILED, ConditionType.TERMINATING)


class ConditionStatus(enum.Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Reason(enum.Enum):
    """Machine-readable causes of a condition (UpperCamelCase); docs/rollout.md explains each."""

    NO_ROLLOUT = "NoRollout"
    ROLLOUT_STARTED = "RolloutStarted"
    TARGET_CHANGED = "TargetChanged"
    STEP_UPGRADING = "StepUpgrading"
    WAITING_FOR_IDLE_NODES = "WaitingForIdleNodes"
    PAUSED_BY_ADMIN = "PausedByAdmin"
    WAITING_FOR_PAUSE_DURATION = "WaitingForPauseDuration"
    PAUSING_FOR_ADMIN = "PausingForAdmin"
    """Written by operators before issue 16 (which set ``pause: true`` themselves); read, never written now."""
    WAITING_FOR_ADMIN = "WaitingForAdmin"
    """A step (or the fallback) waits for an administrator's confirmation (``status.confirmToken``)."""
    STEP_READY = "StepReady"
    STEP_RETRYING = "StepRetrying"
    FALLBACK_PAUSED = "FallbackPaused"
    """The fallback paused the rollout after failures; it waits for a confirmation to retry (or a rollback)."""
    ROLLING_BACK = "RollingBack"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    ROLLOUT_COMPLETED = "RolloutCompleted"
    ROLLOUT_DISABLED = "RolloutDisabled"
    ROLLED_BACK = "RolledBack"
    NO_FAILURE = "NoFailure"
    STEP_FAILED = "StepFailed"
    TOO_MANY_UNAVAILABLE = "TooManyUnavailable"
    ROLLBACK_FAILED = "RollbackFailed"
    RESUMED_AFTER_FAILURE = "ResumedAfterFailure"
    NOT_TERMINATING = "NotTerminating"
    FALLBACK_ROLLBACK = "FallbackRollback"
    ROLLBACK_COMPLETE = "RollbackComplete"


@attrs.frozen
class Condition:
    """One entry of ``conditions``; lastTransitionTime changes only when ``status`` changes."""

    type: ConditionType = attrs.field(metadata={"description": "Progressing, Succeed, Failed or Terminating."})
    status: ConditionStatus = attrs.field(metadata={"description": "True, False or Unknown."})
    last_transition_time: dt.datetime = attrs.field(metadata={"description": "When status last changed."})
    reason: Reason = attrs.field(metadata={"description": "A CamelCase word saying why (machine-readable)."})
    message: str = attrs.field(default="", metadata={"description": "What happened, for people."})


@attrs.frozen
class StepStatus:
    """Table 3.16 ``status.*``: the current step and the counters of the whole rollout."""

    last_pod_spec_revision: str = attrs.field(
        default="",
        metadata={"description": "The driver pods' revision before the rollout (what a rollback returns to)."},
    )
    upgrading_pod_spec_revision: str = attrs.field(
        default="", metadata={"description": "The revision being rolled out."}
    )
    current_step_index: int = attrs.field(
        default=0,
        metadata={
            "description": "0-based index into upgradeSteps (one past the last when the implied final step runs)."
        },
    )
    current_upgrade_replicas: int = attrs.field(
        default=0,
        metadata={
            "description": (
                "Nodes the current step upgrades (started so far plus still to start); in a rollback, nodes to "
                "roll back."
            )
        },
    )
    current_upgrade_ready_replicas: int = attrs.field(
        default=0,
        metadata={
            "description": (
                "Of those, nodes whose new driver pod is ready (in a rollback: back on the old revision and ready)."
            )
        },
    )
    current_failure_retry: int = attrs.field(
        default=0,
        metadata={"description": "Retry rounds the current step (or rollback) has used, at most maxFailureThreshold."},
    )
    current_step_state: StepState = attrs.field(
        default=StepState.COMPLETED,
        metadata={"description": "StepUpgradeInit, StepUpgrade, StepPaused, StepReady or Completed."},
    )
    total_upgrade_replicas: int = attrs.field(default=0, metadata={"description": "Nodes in scope of the rollout."})
    total_upgrade_ready_replicas: int = attrs.field(
        default=0, metadata={"description": "Nodes on the new revision with a ready driver pod."}
    )
    last_update_time: dt.datetime | None = attrs.field(
        default=None, metadata={"description": "When anything in this record last changed."}
    )
    message: str = attrs.field(default="", metadata={"description": "What the current step is doing or waiting for."})
    recheck_time: dt.datetime | None = attrs.field(
        default=None,
        metadata={"description": "When a timed pause ends and the rollout moves on by itself; unset otherwise."},
    )
    current_step_nodes: tuple[str, ...] = attrs.field(
        default=(),
        metadata={
            "description": "Extension: the nodes the current step (or the rollback) has restarted, sorted by name."
        },
    )
    pending_retry_nodes: tuple[str, ...] = attrs.field(
        default=(),
        metadata={
            "description": "Extension: failed nodes the running retry round has not restarted yet, sorted by name."
        },
    )
    waiting_since: dt.datetime | None = attrs.field(
        default=None,
        metadata={
            "description": "Extension: when the step began waiting for an administrator's confirmation, else unset."
        },
    )
    confirm_token: str = attrs.field(
        default="",
        metadata={
            "description": (
                "Extension: the token that confirms the waiting step (annotation metax-tech.com/rollout-confirm); "
                "unique to the rollout revision, the step and the moment the wait began, so no earlier "
                "confirmation and no re-apply of the declared spec can confirm it."
            )
        },
    )


@attrs.frozen
class UpgradeStatus:
    """Table 3.16 ``status.upgradeStatus``."""

    last_applied_spec: str = attrs.field(
        default="",
        metadata={
            "description": "The metax-driver DaemonSet pod template before the rollout (a rollback re-applies it)."
        },
    )
    last_co_driver_spec: str = attrs.field(
        default="", metadata={"description": "The ClusterOperator's spec.driver before the rollout."}
    )
    upgrading: bool = attrs.field(
        default=False, metadata={"description": "Whether a rollout (or a rollback) is running."}
    )
    conditions: tuple[Condition, ...] = attrs.field(
        default=(), metadata={"description": "Progressing, Succeed, Failed and Terminating, as metav1 conditions."}
    )
    phase: Phase = attrs.field(
        default=Phase.IDLING, metadata={"description": "Idling, Progressing, Terminating, Disabled or Disabling."}
    )
    message: str = attrs.field(
        default="", metadata={"description": "What the rollout is doing or waiting for, for people."}
    )
    status: StepStatus = attrs.field(
        default=StepStatus(), metadata={"description": "The current step and the counters of the whole rollout."}
    )

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is kind), None)


# --- times -------------------------------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def as_utc(moment: dt.datetime) -> dt.datetime:
    """``moment`` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def format_time(moment: dt.datetime) -> str:
    """RFC 3339 in UTC: ``2024-05-01T08:00:00Z``, with microseconds only when there are any."""
    utc = as_utc(moment)
    text = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    if utc.microsecond:
        text += f".{utc.microsecond:06d}"
    return text + "Z"


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 timestamp as an aware UTC datetime; ValueError if ``text`` is not one."""
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"must be an RFC 3339 time like 2024-05-01T08:00:00Z, got {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    micro = int((fraction or "0").ljust(6, "0")[:6])
    offset = dt.timedelta(0)
    if not zulu:
        offset = dt.timedelta(hours=int(off_h), minutes=int(off_m)) * (1 if sign == "+" else -1)
    moment = dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.timezone(offset))
    return moment.astimezone(dt.UTC)


def in_utc(status: UpgradeStatus) -> UpgradeStatus:
    """``status`` with every time in UTC (naive times taken as UTC), as its document form would give it back."""
    step = status.status
    return attrs.evolve(
        status,
        conditions=tuple(
            attrs.evolve(c, last_transition_time=as_utc(c.last_transition_time)) for c in status.conditions
        ),
        status=attrs.evolve(
            step,
            last_update_time=None if step.last_update_time is None else as_utc(step.last_update_time),
            recheck_time=None if step.recheck_time is None else as_utc(step.recheck_time),
            waiting_since=None if step.waiting_since is None else as_utc(step.waiting_since),
        ),
    )


# --- document form -----------------------------------------------------------------------------------------


def _step_document(s: StepStatus) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "lastPodSpecRevision": s.last_pod_spec_revision,
        "upgradingPodSpecRevision": s.upgrading_pod_spec_revision,
        "currentStepIndex": s.current_step_index,
        "currentUpgradeReplicas": s.current_upgrade_replicas,
        "currentUpgradeReadyReplicas": s.current_upgrade_ready_replicas,
        "currentFailureRetry": s.current_failure_retry,
        "currentStepState": s.current_step_state.value,
        "totalUpgradeReplicas": s.total_upgrade_replicas,
        "totalUpgradeReadyReplicas": s.total_upgrade_ready_replicas,
    }
    if s.last_update_time is not None:
        doc["lastUpdateTime"] = format_time(s.last_update_time)
    doc["message"] = s.message
    if s.recheck_time is not None:
        doc["recheckTime"] = format_time(s.recheck_time)
    doc["currentStepNodes"] = list(s.current_step_nodes)
    doc["pendingRetryNodes"] = list(s.pending_retry_nodes)
    if s.waiting_since is not None:
        doc["waitingSince"] = format_time(s.waiting_since)
    if s.confirm_token:
        doc["confirmToken"] = s.confirm_token
    return doc


def to_document(status: UpgradeStatus) -> dict[str, Any]:
    """The ``status.upgradeStatus`` document: Table 3.16's camelCase keys, RFC 3339 UTC times."""
    return {
        "lastAppliedSpec": status.last_applied_spec,
        "lastCoDriverSpec": status.last_co_driver_spec,
        "upgrading": status.upgrading,
        "conditions": [
            {
                "type": c.type.value,
                "status": c.status.value,
                "lastTransitionTime": format_time(c.last_transition_time),
                "reason": c.reason.value,
                "message": c.message,
            }
            for c in status.conditions
        ],
        "phase": status.phase.value,
        "message": status.message,
        "status": _step_document(status.status),
    }


class _Reader:
    """Reads typed fields out of a mapping, collecting a FieldError per bad value instead of stopping."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def _get(self, doc: Mapping[str, Any], key: str, path: str, kind: type, what: str, default: Any) -> Any:
        value = doc.get(key)
        if value is None:
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.errors.append(FieldError(f"{path}{key}", f"must be {what}, got {value!r}"))
            return default
        return value

    def string(self, doc: Mapping[str, Any], key: str, path: str) -> str:
        return str(self._get(doc, key, path, str, "a string", ""))

    def boolean(self, doc: Mapping[str, Any], key: str, path: str) -> bool:
        return bool(self._get(doc, key, path, bool, "true or false", False))

    def integer(self, doc: Mapping[str, Any], key: str, path: str) -> int:
        value = int(self._get(doc, key, path, int, "an integer", 0))
        if value < 0:
            self.errors.append(FieldError(f"{path}{key}", f"must not be negative, got {value}"))
            return 0
        return value

    def time(self, doc: Mapping[str, Any], key: str, path: str) -> dt.datetime | None:
        text = self._get(doc, key, path, str, "an RFC 3339 time", None)
        if text is None:
            return None
        try:
            return parse_time(text)
        except ValueError as exc:
            self.errors.append(FieldError(f"{path}{key}", str(exc)))
            return None

    def member(self, doc: Mapping[str, Any], key: str, path: str, kind: type[E], default: E) -> E:
        value = doc.get(key)
        if value is None:
            return default
        for candidate in kind:
            if candidate.value == value:
                return candidate
        allowed = ", ".join(str(m.value) for m in kind)
        self.errors.append(FieldError(f"{path}{key}", f"must be one of {allowed}; got {value!r}"))
        return default

    def names(self, doc: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        value = self._get(doc, key, path, list, "a list of node names", [])
        if not all(isinstance(v, str) for v in value):
            self.errors.append(FieldError(f"{path}{key}", "must be a list of node names (strings)"))
            return ()
        return tuple(sorted(set(value)))

    def mapping(self, doc: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        return dict(self._get(doc, key, path, Mapping, "a mapping", {}))


def _read_condition(r: _Reader, doc: object, path: str) -> Condition | None:
    if not isinstance(doc, Mapping):
        r.errors.append(FieldError(path.rstrip("."), "must be a mapping"))
        return None
    kind = r.member(doc, "type", path, ConditionType, ConditionType.PROGRESSING)
    if doc.get("type") is None:
        r.errors.append(FieldError(f"{path}type", "required field is missing"))
        return None
    moment = r.time(doc, "lastTransitionTime", path) or dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return Condition(
        type=kind,
        status=r.member(doc, "status", path, ConditionStatus, ConditionStatus.UNKNOWN),
        last_transition_time=moment,
        reason=r.member(doc, "reason", path, Reason, Reason.NO_ROLLOUT),
        message=r.string(doc, "message", path),
    )


def from_document(document: object) -> UpgradeStatus:
    """The record a `to_document` document (or an empty or older one) stands for; InvalidSpec if a value is bad."""
    if document is None:
        return UpgradeStatus()
    if not isinstance(document, Mapping):
        raise InvalidSpec([FieldError("upgradeStatus", "must be a mapping")])
    r = _Reader()
    key = "conditions" if "conditions" in document else "condition"
    raw_conditions = r._get(document, key, "", list, "a list of conditions", [])
    conditions = [_read_condition(r, c, f"{key}[{i}].") for i, c in enumerate(raw_conditions)]
    step = r.mapping(document, "status", "")

    def read(key: str) -> int:
        return r.integer(step, key, "status.")

    status = UpgradeStatus(
        last_applied_spec=r.string(document, "lastAppliedSpec", ""),
        last_co_driver_spec=r.string(document, "lastCoDriverSpec", ""),
        upgrading=r.boolean(document, "upgrading", ""),
        conditions=tuple(c for c in conditions if c is not None),
        phase=r.member(document, "phase", "", Phase, Phase.IDLING),
        message=r.string(document, "message", ""),
        status=StepStatus(
            last_pod_spec_revision=r.string(step, "lastPodSpecRevision", "status."),
            upgrading_pod_spec_revision=r.string(step, "upgradingPodSpecRevision", "status."),
            current_step_index=read("currentStepIndex"),
            current_upgrade_replicas=read("currentUpgradeReplicas"),
            current_upgrade_ready_replicas=read("currentUpgradeReadyReplicas"),
            current_failure_retry=read("currentFailureRetry"),
            current_step_state=r.member(step, "currentStepState", "status.", StepState, StepState.COMPLETED),
            total_upgrade_replicas=read("totalUpgradeReplicas"),
            total_upgrade_ready_replicas=read("totalUpgradeReadyReplicas"),
            last_update_time=r.time(step, "lastUpdateTime", "status."),
            message=r.string(step, "message", "status."),
            recheck_time=r.time(step, "recheckTime", "status."),
            current_step_nodes=r.names(step, "currentStepNodes", "status."),
            pending_retry_nodes=r.names(step, "pendingRetryNodes", "status."),
            waiting_since=r.time(step, "waitingSince", "status."),
            confirm_token=r.string(step, "confirmToken", "status."),
        ),
    )
    if r.errors:
        raise InvalidSpec(r.errors)
    return status
