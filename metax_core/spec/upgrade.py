"""How new versions roll across the nodes: the driver's batched canary upgrade and the agents' own update.

Why a module of its own: `metax_core.spec.model` holds one record per chart section; these two policies are the
spec's say over change itself, read by the rollout machine (R-ROLLOUT, Table 3.11: `UpgradePolicy`, `UpgradeStep`)
and by the agent DaemonSets' update strategy when the operator is upgraded (R-UPGRADE: `AgentUpdate`). `model`
re-exports every name here, so callers keep writing ``spec.UpgradePolicy``.
"""

from __future__ import annotations

import attrs

from metax_core.spec.fieldtypes import (
    DESCRIPTION,
    HUNDRED_PERCENT,
    ZERO_PERCENT,
    Drain,
    Fallback,
    IntOrPercent,
    OnCanaryFailure,
)


@attrs.frozen
class UpgradeStep:
    """One batch of the canary rollout (Table 3.11)."""

    replicas: IntOrPercent = attrs.field(
        metadata={
            DESCRIPTION: (
                "How many nodes run the new driver when this step is done (% of nodes in scope, rounded up, ≥ 1)."
            )
        }
    )
    pause: bool | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: "Extension: false = go straight on to the next step; null/true = pause (see pauseDuration)."
        },
    )
    pause_duration: int | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Milliseconds to wait before the next step; unset = wait until an administrator sets pause: false."
            )
        },
    )
    toleration: IntOrPercent = attrs.field(
        default=ZERO_PERCENT,
        metadata={DESCRIPTION: "Failed nodes this step tolerates (% of the step's nodes, rounded down)."},
    )


@attrs.frozen
class UpgradePolicy:
    """Table 3.11: batched canary upgrade of the kernel driver (R-ROLLOUT)."""

    enable_rollout: bool = attrs.field(
        default=False,
        metadata={
            DESCRIPTION: (
                "Upgrade the driver in batched canary steps (upgradeSteps) instead of on every idle node at once."
            )
        },
    )
    upgrade_steps: tuple[UpgradeStep, ...] = attrs.field(
        default=(),
        metadata={
            DESCRIPTION: 'The batches of the rollout, in order; the last one must have replicas "100%" '
            "(at most 100 steps)."
        },
    )
    pause: bool = attrs.field(
        default=False, metadata={DESCRIPTION: "Hold the rollout where it is; set false to resume a paused step."}
    )
    max_parallel: IntOrPercent = attrs.field(
        default=HUNDRED_PERCENT,
        metadata={
            DESCRIPTION: (
                "Nodes upgraded at the same time (integer or percentage, rounded up, at least 1; 0 = unlimited)."
            )
        },
    )
    max_unavailable: IntOrPercent = attrs.field(
        default=ZERO_PERCENT,
        metadata={
            DESCRIPTION: "Nodes that may be unavailable at the same time during the rollout (integer or percentage)."
        },
    )
    max_failure_threshold: int = attrs.field(
        default=0,
        metadata={DESCRIPTION: "Failed node upgrades a step tolerates before the fallback runs (0 to 100000)."},
    )
    fallback: Fallback = attrs.field(
        default=Fallback.PAUSE,
        metadata={DESCRIPTION: "What happens when too many nodes fail: pause (wait for an administrator) or rollback."},
    )
    on_canary_failure: OnCanaryFailure | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Extension: what a failed node in the first step (the canary) does. rollback: the canary goes back "
                "to the previous driver at once, without retries, and the rollout ends rolled back; fallback or "
                "unset: as in any step (maxFailureThreshold retries, then fallback)."
            )
        },
    )
    drain: Drain | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Extension: drain the nodes the rollout wants while GPU workloads run on them; unset: wait for the "
                "workloads to end (the seed's rule)."
            )
        },
    )


@attrs.frozen
class AgentUpdate:
    """Extension (R-UPGRADE): how the node agents move to a new operator release (docs/upgrade.md)."""

    max_unavailable: IntOrPercent = attrs.field(
        default=IntOrPercent(1),
        metadata={
            DESCRIPTION: (
                "Nodes whose agent pod of one component may be replaced at the same time when the operator is "
                "upgraded (integer at least 1, or a percentage of the component's nodes from 1% to 100%, rounded "
                "up): every agent DaemonSet's rollingUpdate.maxUnavailable, and the driver pods' own pace."
            )
        },
    )
