"""The rollout status's records (Table 3.16): phases, step states, conditions, steps, and its times in UTC."""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re

import attrs


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
    CANARY_FAILED = "CanaryFailed"
    """A node of the first step failed and onCanaryFailure is rollback (Failed; issue 41 item 2)."""
    CANARY_ROLLBACK = "CanaryRollback"
    """The canary's nodes are going back to the previous driver (Terminating; onCanaryFailure: rollback)."""
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
class DrainedNode:
    """A node the rollout drains, or released after its drain timed out (extension; docs/rollout.md "Draining")."""

    name: str = attrs.field(metadata={"description": "The node."})
    since: dt.datetime = attrs.field(
        metadata={"description": "When the rollout cordoned it (draining) or uncordoned it again (released)."}
    )
    message: str = attrs.field(
        default="", metadata={"description": "What keeps its GPU workloads there (pods, PodDisruptionBudgets)."}
    )


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
    draining_nodes: tuple[DrainedNode, ...] = attrs.field(
        default=(),
        metadata={
            "description": (
                "Extension: nodes the rollout cordoned to evict their GPU workloads (upgradePolicy.drain), at most "
                "maxParallel; each is uncordoned once its driver pod is ready on the rollout's revision (or failed)."
            )
        },
    )
    released_nodes: tuple[DrainedNode, ...] = attrs.field(
        default=(),
        metadata={
            "description": (
                "Extension: nodes whose drain did not finish within drain.timeoutSeconds: uncordoned, and drained "
                "again only after the other nodes; the message says what blocked them."
            )
        },
    )
    last_confirmation: str = attrs.field(
        default="",
        metadata={
            "description": (
                "Extension: the last value of the annotation metax-tech.com/rollout-confirm the rollout has acted "
                "on: it confirmed a step, or a ConfirmationIgnored Event said why not. A value already acted on is "
                "never reported again, also after an operator restart."
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


@functools.lru_cache(maxsize=8192)
def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 timestamp as an aware UTC datetime; ValueError if ``text`` is not one.

    Remembered (datetimes are immutable): every reconcile reads the creation time of each driver pod, thousands of
    them at 5,000 nodes, and a DaemonSet's pods share few distinct seconds (issue 43 item 7, P1's operator CPU).
    """
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
    moments = (
        *(c.last_transition_time for c in status.conditions),
        step.last_update_time,
        step.recheck_time,
        step.waiting_since,
        *(n.since for n in step.draining_nodes),
        *(n.since for n in step.released_nodes),
    )
    if all(m is None or m.tzinfo is dt.UTC for m in moments):
        return status  # the usual case (a status read from its document is in UTC): six copies fewer (P4)
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
            draining_nodes=tuple(attrs.evolve(n, since=as_utc(n.since)) for n in step.draining_nodes),
            released_nodes=tuple(attrs.evolve(n, since=as_utc(n.since)) for n in step.released_nodes),
        ),
    )
