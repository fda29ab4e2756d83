"""The driver rollout's status (``status.upgradeStatus``, 001 Table 3.16) as records, and its document form.

Why a module of its own: the status is the rollout machine's only memory. The operator stores it in the
ClusterOperator's status subresource and hands it back to `metax_core.rollout.machine.decide` on the next reconcile,
so the records must survive the round trip exactly (`to_document` / `from_document`, one cattrs converter
with the spec converter's scalar rules), and an administrator
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

from metax_core.rollout.status.document import from_document, to_document
from metax_core.rollout.status.records import (
    ACTIVE_PHASES,
    CONDITION_ORDER,
    Condition,
    ConditionStatus,
    ConditionType,
    DrainedNode,
    Phase,
    Reason,
    StepState,
    StepStatus,
    UpgradeStatus,
    as_utc,
    format_time,
    in_utc,
    parse_time,
)

__all__ = [
    "ACTIVE_PHASES",
    "CONDITION_ORDER",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DrainedNode",
    "Phase",
    "Reason",
    "StepState",
    "StepStatus",
    "UpgradeStatus",
    "as_utc",
    "format_time",
    "from_document",
    "in_utc",
    "parse_time",
    "to_document",
]
