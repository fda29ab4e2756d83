"""The rollout decision carried out: its Events on ``cluster-operator`` and the driver pods it deletes (R-ROLLOUT).

Why a module of its own: the decision (`rollout_driver.drive`, then `metax_core.rollout`) says which driver pods
to restart and what step the rollout is at; this is what an administrator then sees happen: a pod deleted, with
an Event saying which driver its node gets, and an Event when the rollout moves to another step or ignores a
confirmation. Quiet while nothing moves: a step already reported is not reported again.
"""

from __future__ import annotations

import logging

from metax_core.ports.cluster import Events, EventType, ObjectRef, Objects
from metax_core.rollout import status as rollout_status
from metax_core.wire import event_reasons
from services.operator import rollout_driver

log = logging.getLogger(__name__)


def apply(outcome: rollout_driver.Outcome, *, objects: Objects, events: Events, ref: ObjectRef, namespace: str) -> None:
    """Report ``outcome`` on ``ref`` (``cluster-operator``) and delete the driver pods it names."""
    if outcome.ignored_confirmation:  # once per annotation value: the status keeps it (lastConfirmation)
        log.warning("%s", outcome.ignored_confirmation)
        events.emit(
            ref,
            reason=event_reasons.CONFIRMATION_IGNORED,
            message=outcome.ignored_confirmation,
            type=EventType.WARNING,
            action="Rollout",
        )
    _report_step(outcome, events, ref)
    deleted = [n for n in outcome.delete_pods if objects.delete("v1", "Pod", n, namespace)]  # all first, then reports
    which = "previous" if outcome.rollback else "new"
    for name in deleted:
        if name in outcome.agent_restarts:
            message = f"driver pod {name} deleted: its node gets this release's driver-manager and keeps its driver"
        else:
            message = f"driver pod {name} deleted: its node gets the {which} driver"
        log.info("%s", message)
        events.emit(
            ObjectRef("v1", "Pod", name, namespace),
            reason=event_reasons.DRIVER_POD_DELETED,
            message=message,
            action="Rollout",
        )


def _report_step(outcome: rollout_driver.Outcome, events: Events, ref: ObjectRef) -> None:
    """An Event when a rollout under way (or just over) moved to another phase, step or step state."""
    before = outcome.previous
    after = outcome.status
    if not (after.upgrading or (before is not None and before.upgrading)):
        return
    moved = before is None or (
        before.phase,
        before.status.current_step_index,
        before.status.current_step_state,
    ) != (
        after.phase,
        after.status.current_step_index,
        after.status.current_step_state,
    )
    if not moved:
        return
    failed = after.condition(rollout_status.ConditionType.FAILED)
    warning = failed is not None and failed.status is rollout_status.ConditionStatus.TRUE
    log.info("driver rollout: %s", after.message)
    events.emit(
        ref,
        reason=event_reasons.driver_rollout(after.status.current_step_state.value),
        message=after.message,
        type=EventType.WARNING if warning else EventType.NORMAL,
        action="Rollout",
    )
