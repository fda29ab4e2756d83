"""The status roll-up (metax_core.cluster.status) and the operator's ConfigMaps (metax_core.cluster.configmaps).

Aspects: readiness observed from DaemonSet/Deployment status, conditions per situation, lastTransitionTime
moves only on a transition, invalid spec lists field paths, document round trip of conditions, a message past
the CRD's maxLength is cut (saying so), driver-config defaults parse back, vfio config keeps order (a broken
driver-config counting as no VFs: tests/unit/test_vf_restarts.py).
"""

from __future__ import annotations

import datetime as dt

import yaml

from metax_core import components, wording
from metax_core.cluster import configmaps, status
from metax_core.components import Component
from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import driver_config
from metax_core.spec import model as spec

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def _ds(desired: int, ready: int, updated: int, generation: int = 1, observed: int = 1) -> dict:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "metax-x", "generation": generation},
        "status": {
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "updatedNumberScheduled": updated,
            "observedGeneration": observed,
        },
    }


def test_observe_ready_deploying_and_unobserved_changes() -> None:
    assert status.observe(Component.MACA, [_ds(3, 3, 3)]).state is status.State.READY
    assert status.observe(Component.MACA, [_ds(0, 0, 0)]).state is status.State.READY
    assert status.observe(Component.MACA, [_ds(3, 2, 3)]).state is status.State.DEPLOYING
    unobserved = status.observe(Component.MACA, [_ds(3, 3, 3, generation=2, observed=1)])
    assert unobserved.state is status.State.DEPLOYING and "not yet observed" in unobserved.message
    assert status.observe(Component.MACA, [None]).state is status.State.DEPLOYING
    # OnDelete (the driver): old pods that are ready still count
    assert status.observe(Component.DRIVER, [_ds(3, 3, 1)], rolling_update=False).state is status.State.READY


def _ready_all() -> list[status.ComponentResult]:
    return [
        status.ComponentResult(c, True, status.State.READY, 2, 2, 2) for c in (Component.GPU_LABEL, Component.RUNTIME)
    ]


def test_roll_up_ready_and_transition_times_move_only_on_change() -> None:
    first = status.roll_up(generation=3, results=_ready_all(), previous=(), now=T0)
    by = {c.type: c for c in first.conditions}
    assert by["Ready"].status == "True" and by["Degraded"].status == "False" and by["Progressing"].status == "False"
    assert first.phase == "Ready" and first.observed_generation == 3
    again = status.roll_up(generation=3, results=_ready_all(), previous=first.conditions, now=T1)
    assert again == first
    deploying = [*_ready_all(), status.ComponentResult(Component.MACA, True, status.State.DEPLOYING, 2, 1, 1, "1/2")]
    third = status.roll_up(generation=3, results=deploying, previous=first.conditions, now=T1)
    by3 = {c.type: c for c in third.conditions}
    assert by3["Ready"].status == "False" and by3["Ready"].last_transition_time == T1
    assert by3["Degraded"].last_transition_time == T0


def test_roll_up_blocked_failed_and_invalid() -> None:
    plan = components.plan({Component.GPU_LABEL, Component.MACA})
    blocked = [status.blocked(b) for b in plan.blocked]
    rolled = status.roll_up(generation=1, results=[*_ready_all(), *blocked], previous=(), now=T0)
    degraded = {c.type: c for c in rolled.conditions}["Degraded"]
    assert degraded.status == "True" and degraded.reason == "PrerequisiteDisabled" and "runtime" in degraded.message
    failed = status.roll_up(
        generation=1, results=[status.failed(Component.MACA, "apply failed: boom")], previous=(), now=T0
    )
    assert {c.type: c for c in failed.conditions}["Degraded"].reason == "ComponentFailed"
    assert failed.phase == "Degraded"
    invalid = InvalidSpec([FieldError("driver.payload.version", "required")])
    bad = status.roll_up(generation=1, results=(), previous=(), now=T0, invalid=invalid)
    by = {c.type: c for c in bad.conditions}
    assert by["Degraded"].reason == "InvalidSpec" and "driver.payload.version" in by["Degraded"].message
    assert by["Ready"].status == "False" and bad.phase == "Invalid"


def test_conditions_survive_their_document_form() -> None:
    rolled = status.roll_up(generation=2, results=_ready_all(), previous=(), now=T0)
    doc = status.to_document(rolled)
    assert [c["type"] for c in doc["conditions"]] == ["Ready", "Progressing", "Degraded"]
    assert status.conditions_from_document(doc) == rolled.conditions
    assert [c["name"] for c in doc["components"]] == ["gpuLabel", "runtime"]


def test_driver_config_defaults_parse_back_to_nothing() -> None:
    cm = configmaps.driver_config_map("ns")
    assert cm["metadata"]["name"] == "driver-config" and cm["metadata"]["namespace"] == "ns"
    assert driver_config.parse(cm["data"]) == driver_config.DriverConfig()


def test_vfio_config_keeps_the_entries_in_order() -> None:
    s = spec.ClusterOperatorSpec(
        vfio_manager=spec.VfioManager(
            vfio_config=(spec.VfioConfigEntry("gpu-1", "all"), spec.VfioConfigEntry("gpu-.*", "0,1"))
        )
    )
    cm = configmaps.vfio_config_map(s)
    assert cm["metadata"]["name"] == "metax-vfio-config"
    assert yaml.safe_load(cm["data"]["vfioConfig"]) == [
        {"nodeName": "gpu-1", "gpus": "all"},
        {"nodeName": "gpu-.*", "gpus": "0,1"},
    ]


def test_a_condition_message_past_the_crd_limit_is_cut_and_says_so() -> None:
    """The last guard: a message past the CRD's maxLength would make the API server refuse the whole status."""
    limit = wording.CONDITION_MESSAGE_LIMIT
    short = status.condition_document(status.Condition("Ready", "False", "Why", "x" * limit, T0, 1))
    assert short["message"] == "x" * limit  # at the limit: whole
    long = status.condition_document(status.Condition("Ready", "False", "Why", "y" * (limit + 1), T0, 1))
    assert len(long["message"]) == limit and long["message"].endswith(wording.CUT)
    assert long["message"].startswith("y" * (limit - len(wording.CUT)))
