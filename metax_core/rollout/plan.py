"""The arithmetic of an upgrade policy (Table 3.11): step targets, loop sizes, tolerations, pauses.

Why a module of its own: these numbers are what an administrator checks first ("how many nodes does step 2
touch, and how many at once?"), so they are small named functions with the rounding rule written next to
each, shared by the rollout machine (`metax_core.rollout.machine`), its simulation and ``rollout plan``.

Rounding (R-ROLLOUT, docs/rollout.md):

- ``replicas``: % of the nodes in scope rounded UP, at least 1, at most the fleet; a step never targets fewer
  nodes than an earlier one (int and % steps can be mixed, so the machine takes the running maximum);
- ``maxParallel``: an int, or % of the step's own node count (its target minus the previous step's) rounded
  UP and at least 1; the int 0 means no limit; "0%" means 1 (the rule "at least one" wins, the safe side);
- ``toleration``: an int, or % of the step's own node count rounded DOWN;
- ``maxUnavailable``: an int, or % of the nodes in scope rounded DOWN.

A policy whose last step is not "100%" (the webhook refuses it, but the machine must be total) gets an implied
last step ``{replicas: 100%}`` that pauses for an administrator: the rollout never ends with nodes left on
the old driver, and never goes past what the administrator wrote without a human saying so.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from metax_core.spec import model as spec

IMPLIED_LAST_STEP = spec.UpgradeStep(replicas=spec.HUNDRED_PERCENT)


class PauseKind(enum.Enum):
    """How a step waits once its nodes are done."""

    NONE = "none"
    """Step ``pause: false`` (extension): go straight on."""
    TIMED = "timed"
    """``pauseDuration`` set: resume by itself when it has passed, unless pause is true."""
    MANUAL = "manual"
    """No pauseDuration: wait until an administrator resumes (docs/rollout.md, "Resuming")."""


def steps(policy: spec.UpgradePolicy) -> tuple[spec.UpgradeStep, ...]:
    """The policy's steps, plus the implied final "100%" step if the last one does not reach every node."""
    written = tuple(policy.upgrade_steps)
    if written and written[-1].replicas == spec.HUNDRED_PERCENT:
        return written
    return (*written, IMPLIED_LAST_STEP)


def pause_kind(step: spec.UpgradeStep) -> PauseKind:
    """A pauseDuration makes a timed pause unless ``pause: true`` (then a human decides: the safer reading)."""
    if step.pause_duration is not None and step.pause is not True:
        return PauseKind.TIMED
    if step.pause is False:
        return PauseKind.NONE
    return PauseKind.MANUAL


def pause_label(step: spec.UpgradeStep) -> str | None:
    """``"manual"``, ``"<N>ms"`` or None, as ``rollout plan -o json`` prints it."""
    kind = pause_kind(step)
    if kind is PauseKind.TIMED:
        return f"{step.pause_duration}ms"
    return "manual" if kind is PauseKind.MANUAL else None


def raw_target(replicas: spec.IntOrPercent, total: int) -> int:
    """Nodes that run the new driver when a step is done: % rounds up, at least 1, at most ``total``."""
    if total <= 0:
        return 0
    return min(total, max(1, replicas.resolve(total, round_up=True)))


@attrs.frozen
class StepPlan:
    """One step resolved against a fleet size."""

    index: int
    target: int
    """New-driver nodes when the step is done (cumulative)."""
    size: int
    """Nodes the step itself upgrades: its target minus the previous step's."""
    loop: int
    """Nodes started at once (maxParallel resolved against ``size``)."""
    toleration: int
    """Failed nodes of this step that do not fail it."""
    pause: PauseKind
    step: spec.UpgradeStep


def loop_size(max_parallel: spec.IntOrPercent, size: int) -> int:
    """maxParallel for a step of ``size`` nodes: 0 = no limit, % rounds up, always at least 1."""
    if not max_parallel.percent and max_parallel.value == 0:
        return max(1, size)
    return max(1, max_parallel.resolve(size, round_up=True))


def toleration(value: spec.IntOrPercent, size: int) -> int:
    return max(0, value.resolve(size, round_up=False))


def max_unavailable(policy: spec.UpgradePolicy, total: int) -> int:
    return max(0, policy.max_unavailable.resolve(total, round_up=False))


def plan(policy: spec.UpgradePolicy, total: int) -> tuple[StepPlan, ...]:
    """Every step of ``policy`` for a fleet of ``total`` nodes."""
    result: list[StepPlan] = []
    previous = 0
    for index, step in enumerate(steps(policy)):
        target = max(previous, raw_target(step.replicas, total))
        size = target - previous
        result.append(
            StepPlan(
                index=index,
                target=target,
                size=size,
                loop=loop_size(policy.max_parallel, size),
                toleration=toleration(step.toleration, size),
                pause=pause_kind(step),
                step=step,
            )
        )
        previous = target
    return tuple(result)


def step_at(plans: Sequence[StepPlan], index: int) -> StepPlan:
    """The step at ``index``, clamped into range (a stored index can outlive a shorter policy)."""
    return plans[min(max(index, 0), len(plans) - 1)]


def on_failure(policy: spec.UpgradePolicy) -> str:
    """What the rollout does with a node whose new driver fails, in words (``rollout plan``, ``diff``)."""
    retries = f"{policy.max_failure_threshold} retr{'y' if policy.max_failure_threshold == 1 else 'ies'}"
    later = f"{retries}, then fallback {policy.fallback.value}"
    if policy.on_canary_failure is spec.OnCanaryFailure.ROLLBACK:
        return f"a failed canary (step 1) is rolled back at once (onCanaryFailure: rollback); later steps: {later}"
    return f"every step: {later}"


def on_busy(policy: spec.UpgradePolicy) -> str:
    """What the rollout does with a node running GPU workloads, in words (``rollout plan``, ``diff``)."""
    drain = policy.drain
    if drain is None or not drain.enable:
        return "wait for its GPU workloads to end (drain is off)"
    allowed = [what for what, on in (("bare pods", drain.force), ("emptyDir pods", drain.delete_empty_dir)) if on]
    only = f" with labels {dict(drain.pod_selector)}" if drain.pod_selector else ""
    also = f", {' and '.join(allowed)} too" if allowed else ""
    return (
        f"drain it: cordon, evict its GPU pods{only} through the Eviction API{also}, at most {policy.max_parallel} "
        f"nodes at a time; released after {drain.timeout_seconds}s if they do not leave"
    )
