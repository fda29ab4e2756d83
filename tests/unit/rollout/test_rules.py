"""The webhook's rule for updates during a driver rollout (R-WEBHOOK): only enableRollout and pause may change.

Covers: any change allowed when no rollout runs (no status, Idling, Disabled); during Progressing,
Terminating and Disabling every other changed field is refused with its path (nested keys, list elements,
keys added and removed); the two allowed fields pass; the paths of the document diff.
"""

from __future__ import annotations

import attrs
import pytest

from metax_core.rollout import draft as rollout_draft
from metax_core.rollout import rules as rollout_rules
from metax_core.rollout.status import Phase, UpgradeStatus
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE

BASE = validation.parse(
    {
        "registry": REGISTRY_EXAMPLE,
        "driver": {
            "payload": {"version": "1.0.0"},
            "upgradePolicy": {"enableRollout": True, "upgradeSteps": [{"replicas": 2}, {"replicas": "100%"}]},
        },
    }
)
ROLLING = UpgradeStatus(upgrading=True, phase=Phase.PROGRESSING)


def with_policy(s: spec.ClusterOperatorSpec, **changes: object) -> spec.ClusterOperatorSpec:
    policy = attrs.evolve(s.driver.upgrade_policy, **changes)  # type: ignore[arg-type]
    return attrs.evolve(s, driver=attrs.evolve(s.driver, upgrade_policy=policy))


def test_enable_rollout_and_pause_may_change_during_a_rollout() -> None:
    changed = with_policy(BASE, enable_rollout=False, pause=True)
    assert rollout_rules.update_errors(BASE, changed, ROLLING) == []


def test_other_changes_during_a_rollout_are_refused_with_their_paths() -> None:
    changed = with_policy(BASE, pause=True, max_parallel=spec.IntOrPercent(1))
    changed = attrs.evolve(
        changed, driver=attrs.evolve(changed.driver, payload=attrs.evolve(changed.driver.payload, version="2.0.0"))
    )
    changed = attrs.evolve(changed, registry="registry.example/metax")
    errors = rollout_rules.update_errors(BASE, changed, ROLLING)
    assert [e.path for e in errors] == ["driver.payload.version", "driver.upgradePolicy.maxParallel", "registry"]
    assert all("cannot change while a driver rollout is in progress (phase Progressing)" in e.message for e in errors)
    assert "only driver.upgradePolicy.enableRollout and driver.upgradePolicy.pause may change" in errors[0].message


def test_list_elements_and_optional_keys_are_reported_where_they_change() -> None:
    steps = (
        spec.UpgradeStep(spec.IntOrPercent(3)),
        spec.UpgradeStep(spec.IntOrPercent(5), pause_duration=100),
        spec.UpgradeStep(spec.HUNDRED_PERCENT),
    )
    changed = with_policy(BASE, upgrade_steps=steps)
    paths = [e.path for e in rollout_rules.update_errors(BASE, changed, ROLLING)]
    assert paths == [
        "driver.upgradePolicy.upgradeSteps[0].replicas",
        "driver.upgradePolicy.upgradeSteps[1].pauseDuration",
        "driver.upgradePolicy.upgradeSteps[1].replicas",
        "driver.upgradePolicy.upgradeSteps[2]",
    ]


@pytest.mark.parametrize("phase", [Phase.TERMINATING, Phase.DISABLING])
def test_a_running_rollback_counts_as_a_rollout(phase: Phase) -> None:
    changed = with_policy(BASE, max_failure_threshold=2)
    errors = rollout_rules.update_errors(BASE, changed, UpgradeStatus(phase=phase))
    assert [e.path for e in errors] == ["driver.upgradePolicy.maxFailureThreshold"]
    assert f"(phase {phase.value})" in errors[0].message


@pytest.mark.parametrize(
    "status", [None, UpgradeStatus(), UpgradeStatus(phase=Phase.DISABLED), UpgradeStatus(phase=Phase.IDLING)]
)
def test_without_a_rollout_anything_may_change(status: UpgradeStatus | None) -> None:
    changed = with_policy(BASE, max_failure_threshold=2)
    assert rollout_rules.update_errors(BASE, changed, status) == []
    assert not rollout_rules.rollout_active(status)


def test_changed_paths_sees_added_removed_and_retyped_values() -> None:
    before = {"a": {"b": 1, "c": [1, 2]}, "d": True, "e": 1}
    after = {"a": {"c": [1, 3, 4]}, "d": 1, "f": None, "e": 1}
    assert list(rollout_rules.changed_paths(before, after)) == ["a.b", "a.c[1]", "a.c[2]", "d", "f"]


def test_the_confirmation_annotation_is_not_a_spec_change() -> None:
    """Issue 16: confirming a waiting step writes metadata only; the mid-rollout rule compares spec only."""
    running = UpgradeStatus(upgrading=True, phase=Phase.PROGRESSING)
    body = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.14.6"}}}
    metadata = {"name": "cluster-operator"}
    kind = {"apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator"}
    before = validation.parse({**kind, "metadata": metadata, "spec": body})
    annotated = {**metadata, "annotations": {rollout_draft.CONFIRM_ANNOTATION: "x-step1-0"}}
    after = validation.parse({**kind, "metadata": annotated, "spec": body})
    assert rollout_rules.update_errors(before, after, running) == []
