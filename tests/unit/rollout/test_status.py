"""The rollout status document (``status.upgradeStatus``, Table 3.16) and its round trip.

Covers: exact camelCase keys; RFC 3339 UTC times (seconds and microseconds, offsets read back as UTC);
unset times left out; the table's own spelling ``condition`` read as well; unknown keys ignored; a wrong
value refused with its path; an empty document is the initial status.
"""

from __future__ import annotations

import datetime as dt

import pytest

from metax_core.errors import InvalidSpec
from metax_core.rollout import status as rs

T0 = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC)

STATUS = rs.UpgradeStatus(
    last_applied_spec='{"containers": []}',
    last_co_driver_spec='{"payload": {"version": "1.0"}}',
    upgrading=True,
    conditions=(
        rs.Condition(rs.ConditionType.PROGRESSING, rs.ConditionStatus.TRUE, T0, rs.Reason.STEP_UPGRADING, "step 1"),
        rs.Condition(rs.ConditionType.SUCCEED, rs.ConditionStatus.UNKNOWN, T0, rs.Reason.ROLLOUT_IN_PROGRESS, ""),
    ),
    phase=rs.Phase.PROGRESSING,
    message="rolling out",
    status=rs.StepStatus(
        last_pod_spec_revision="aaa",
        upgrading_pod_spec_revision="bbb",
        current_step_index=1,
        current_upgrade_replicas=3,
        current_upgrade_ready_replicas=2,
        current_failure_retry=1,
        current_step_state=rs.StepState.STEP_PAUSED,
        total_upgrade_replicas=10,
        total_upgrade_ready_replicas=4,
        last_update_time=T0,
        message="paused",
        recheck_time=T0 + dt.timedelta(seconds=10, microseconds=500_000),
        current_step_nodes=("node-03", "node-04", "node-05"),
        pending_retry_nodes=("node-04",),
    ),
)


def test_document_has_exactly_the_table_keys() -> None:
    doc = rs.to_document(STATUS)
    assert list(doc) == ["lastAppliedSpec", "lastCoDriverSpec", "upgrading", "conditions", "phase", "message", "status"]
    assert list(doc["conditions"][0]) == ["type", "status", "lastTransitionTime", "reason", "message"]
    assert list(doc["status"]) == [
        "lastPodSpecRevision",
        "upgradingPodSpecRevision",
        "currentStepIndex",
        "currentUpgradeReplicas",
        "currentUpgradeReadyReplicas",
        "currentFailureRetry",
        "currentStepState",
        "totalUpgradeReplicas",
        "totalUpgradeReadyReplicas",
        "lastUpdateTime",
        "message",
        "recheckTime",
        "currentStepNodes",
        "pendingRetryNodes",
    ]
    assert doc["phase"] == "Progressing"
    assert doc["status"]["currentStepState"] == "StepPaused"
    assert doc["conditions"][0] == {
        "type": "Progressing",
        "status": "True",
        "lastTransitionTime": "2025-03-04T05:06:07Z",
        "reason": "StepUpgrading",
        "message": "step 1",
    }
    assert doc["status"]["recheckTime"] == "2025-03-04T05:06:17.500000Z"


def test_round_trip_is_exact() -> None:
    assert rs.from_document(rs.to_document(STATUS)) == STATUS


def test_unset_times_are_left_out() -> None:
    doc = rs.to_document(rs.UpgradeStatus())
    assert "recheckTime" not in doc["status"] and "lastUpdateTime" not in doc["status"]


def test_empty_or_missing_document_is_the_initial_status() -> None:
    assert rs.from_document(None) == rs.UpgradeStatus()
    assert rs.from_document({}) == rs.UpgradeStatus()


def test_table_spelling_condition_and_unknown_keys_are_read() -> None:
    doc = rs.to_document(STATUS)
    doc["condition"] = doc.pop("conditions")
    doc["someFutureField"] = {"x": 1}
    doc["status"]["anotherOne"] = 3
    assert rs.from_document(doc) == STATUS


def test_times_with_offsets_are_read_as_utc() -> None:
    assert rs.parse_time("2025-03-04T13:06:07+08:00") == T0
    assert rs.parse_time("2025-03-04T05:06:07.5Z") == T0 + dt.timedelta(microseconds=500_000)
    assert rs.format_time(dt.datetime(2025, 3, 4, 13, 6, 7, tzinfo=dt.timezone(dt.timedelta(hours=8)))) == (
        "2025-03-04T05:06:07Z"
    )
    assert rs.format_time(dt.datetime(2025, 3, 4, 5, 6, 7)) == "2025-03-04T05:06:07Z"  # naive = UTC


@pytest.mark.parametrize("text", ["2025-03-04 05:06:07", "yesterday", "2025-03-04T05:06:07"])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        rs.parse_time(text)


def test_bad_values_are_refused_with_their_paths() -> None:
    doc = rs.to_document(STATUS)
    doc["phase"] = "Running"
    doc["upgrading"] = "yes"
    doc["status"]["currentStepIndex"] = "1"
    doc["status"]["recheckTime"] = "soon"
    doc["status"]["currentStepNodes"] = [1, 2]
    doc["conditions"][0]["reason"] = "not a reason"
    with pytest.raises(InvalidSpec) as caught:
        rs.from_document(doc)
    paths = sorted(e.path for e in caught.value.errors)
    assert paths == [
        "conditions[0].reason",
        "phase",
        "status.currentStepIndex",
        "status.currentStepNodes",
        "status.recheckTime",
        "upgrading",
    ]
    assert "must be one of Idling, Progressing, Terminating, Disabled, Disabling" in str(caught.value)


def test_a_condition_without_type_or_a_non_mapping_document_is_refused() -> None:
    with pytest.raises(InvalidSpec, match=r"conditions\[0\]\.type: required field is missing"):
        rs.from_document({"conditions": [{"status": "True"}]})
    with pytest.raises(InvalidSpec, match="upgradeStatus: must be a mapping"):
        rs.from_document(["not", "a", "mapping"])
    with pytest.raises(InvalidSpec, match="must not be negative"):
        rs.from_document({"status": {"currentFailureRetry": -1}})


def test_condition_lookup() -> None:
    assert STATUS.condition(rs.ConditionType.SUCCEED) is STATUS.conditions[1]
    assert STATUS.condition(rs.ConditionType.FAILED) is None
