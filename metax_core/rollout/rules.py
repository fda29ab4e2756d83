"""What the admission webhook refuses while a driver rollout runs (R-WEBHOOK, 001 §3.2.8).

Why it exists: the seed allows only two edits during a rollout, the switch (``enableRollout``) and the brake
(``pause``). Any other change would move the rollout's target or its rules under it (a new driver version
half-way through a step, a smaller toleration after failures were accepted). The rollout machine copes with
such changes if they happen anyway (docs/rollout.md), but the webhook stops them at the door with one
error per changed field, named by its path in the document, so an administrator sees exactly what to undo.

Only ``spec`` is compared: metadata, and above all the confirmation annotation
``metax-tech.com/rollout-confirm`` that confirms a waiting step (issue 16, docs/rollout.md), is never refused.

Shape rules for the policy itself (Table 3.11) are `metax_core.spec.validation.upgrade_policy_errors`; the webhook
calls both.
"""

from __future__ import annotations

from collections.abc import Iterator

from metax_core.errors import FieldError
from metax_core.rollout.status import ACTIVE_PHASES, UpgradeStatus
from metax_core.spec import converter
from metax_core.spec import model as spec

MUTABLE_DURING_ROLLOUT = frozenset({"driver.upgradePolicy.enableRollout", "driver.upgradePolicy.pause"})
"""The only spec paths an update may change while a rollout (or its rollback) runs."""


def rollout_active(status: UpgradeStatus | None) -> bool:
    """A rollout or its rollback owns the driver pods: ``upgrading`` is true or the phase says so."""
    return status is not None and (status.upgrading or status.phase in ACTIVE_PHASES)


def changed_paths(before: object, after: object, path: str = "") -> Iterator[str]:
    """Every path where two documents differ: a key or list element added or removed, or a value changed."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in before or key not in after:
                yield here
            else:
                yield from changed_paths(before[key], after[key], here)
    elif isinstance(before, list) and isinstance(after, list):
        for index in range(max(len(before), len(after))):
            here = f"{path}[{index}]"
            if index >= len(before) or index >= len(after):
                yield here
            else:
                yield from changed_paths(before[index], after[index], here)
    elif before != after or type(before) is not type(after):
        yield path


def update_errors(
    old: spec.ClusterOperatorSpec, new: spec.ClusterOperatorSpec, status: UpgradeStatus | None
) -> list[FieldError]:
    """One FieldError per changed field that may not change now (none when no rollout runs)."""
    if status is None or not rollout_active(status):
        return []
    why = (
        f"cannot change while a driver rollout is in progress (phase {status.phase.value}); only "
        "driver.upgradePolicy.enableRollout and driver.upgradePolicy.pause may change until it finishes"
    )
    changed = changed_paths(converter.unstructure(old), converter.unstructure(new))
    return [FieldError(path, why) for path in changed if path not in MUTABLE_DURING_ROLLOUT]
