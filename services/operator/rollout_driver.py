"""Drives the driver rollout (R-ROLLOUT) for real: the reconciler gathers, the core decides, this logs and hands back.

Why a module of its own: every choice of the rollout is the core's (`metax_core.rollout.drive`: the snapshot,
the machine's decision, the template to apply, the pods to delete, when to look again); this is the shell
around it. The reconciler hands it what it gathered from the informer caches (the driver pods, the live and
desired DaemonSets, the GPU nodes and those running GPU workloads, the stored ``status.upgradeStatus``), and
`rollout_apply` carries the outcome out. What the core ignored (an unreadable verdict or stored status) is
logged here, the only side effect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec

from metax_core.rollout import drive as rollout_drive
from metax_core.rollout import status as rollout_status

log = logging.getLogger(__name__)
Gathered = ParamSpec("Gathered")

Outcome = rollout_drive.Outcome
is_driver_pod = rollout_drive.is_driver_pod


def previous_status(cr_status: Mapping[str, Any] | None) -> rollout_status.UpgradeStatus | None:
    """The stored status the rollout continues from (the drain looks at it before the decision)."""
    status, problem = rollout_drive.stored_status(cr_status)
    if problem:
        log.warning("%s", problem)
    return status


def _logged(decide: Callable[Gathered, Outcome]) -> Callable[Gathered, Outcome]:
    """``decide`` with the inputs it ignored logged: the one thing the shell adds to the core's turn."""

    def drive(*args: Gathered.args, **kwargs: Gathered.kwargs) -> Outcome:
        outcome = decide(*args, **kwargs)
        for problem in outcome.problems:
            log.warning("%s", problem)
        return outcome

    return drive


drive = _logged(rollout_drive.drive)
"""`metax_core.rollout.drive.drive` (same keyword arguments, gathered by the reconciler), its problems logged."""
