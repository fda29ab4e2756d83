"""`metax_core.node.readiness`: the node agents' readiness signal and "may this node advertise?" (R-READY).

- every required component ready → may advertise; a missing or not-ready one → no, with a reason naming it;
- components that are not required do not matter;
- with a maximum age, an old (or undated) "ready" counts as stale;
- the required list parses from the env form and refuses names that are not DNS labels;
- documents round-trip, and every problem in a bad document is reported at once.
"""

from __future__ import annotations

import datetime

import pytest

from metax_core.errors import InvalidSpec
from metax_core.node import readiness

R = readiness.ComponentReadiness
T0 = datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)


def test_all_required_ready() -> None:
    d = readiness.decide(["driver", "maca"], {"driver": R("driver", True), "maca": R("maca", True), "x": R("x", False)})
    assert d.may_advertise and d.reason == "all required components ready"


def test_missing_and_not_ready_are_named() -> None:
    d = readiness.decide(
        ["gpu-label", "driver", "maca"],
        {"driver": R("driver", False, "module refused: -EBUSY"), "maca": R("maca", False)},
    )
    assert not d.may_advertise
    assert d.missing == ("gpu-label",)
    assert [s.component for s in d.not_ready] == ["driver", "maca"]
    assert d.reason == (
        "no readiness signal from gpu-label; driver not ready: module refused: -EBUSY; maca not ready: no reason given"
    )


def test_nothing_required_means_ready() -> None:
    assert readiness.decide([], {}).may_advertise


def test_stale_signals_do_not_count() -> None:
    signals = {"driver": R("driver", True, updated_at=T0), "maca": R("maca", True)}
    fresh = readiness.decide(
        ["driver"], signals, now=T0 + datetime.timedelta(seconds=30), max_age=datetime.timedelta(minutes=1)
    )
    assert fresh.may_advertise
    old = readiness.decide(
        ["driver", "maca"], signals, now=T0 + datetime.timedelta(minutes=2), max_age=datetime.timedelta(minutes=1)
    )
    assert not old.may_advertise and old.stale == ("driver", "maca")
    assert "readiness older than 0:01:00 from driver, maca" in old.reason


def test_parse_required() -> None:
    assert readiness.parse_required(" gpu-label, container-runtime,,maca ,gpu-label") == (
        "gpu-label",
        "container-runtime",
        "maca",
    )
    assert readiness.parse_required("") == ()
    with pytest.raises(InvalidSpec, match=r"METAX_REQUIRED_COMPONENTS\[1\]: 'Driver' must be a lowercase DNS label"):
        readiness.parse_required("maca,Driver")


def test_document_round_trip() -> None:
    signal = R("driver", True, "loaded", 7, "2.18.0", T0, 1733000000123456789)
    doc = readiness.to_document(signal)
    assert doc == {
        "component": "driver",
        "ready": True,
        "reason": "loaded",
        "observedGeneration": 7,
        "version": "2.18.0",
        "updatedAt": "2024-05-01T10:00:00+00:00",
        "sequence": 1733000000123456789,
    }
    assert readiness.from_document(doc) == signal
    assert readiness.from_document({"component": "maca", "ready": False}) == R("maca", False)


def test_bad_documents_report_every_problem() -> None:
    with pytest.raises(InvalidSpec) as caught:
        readiness.from_document(
            {
                "component": "Driver",
                "ready": 1,
                "observedGeneration": True,
                "updatedAt": "yesterday",
                "sequence": "7",
                "extra": 0,
            }
        )
    assert [e.path for e in caught.value.errors] == [
        "$.extra",
        "$.component",
        "$.ready",
        "$.observedGeneration",
        "$.sequence",
        "$.updatedAt",
    ]
    with pytest.raises(InvalidSpec, match=r"\$.updatedAt: must carry a UTC offset"):
        readiness.from_document({"component": "maca", "ready": True, "updatedAt": "2024-05-01T10:00:00"})
    with pytest.raises(InvalidSpec, match=r"\$: must be an object"):
        readiness.from_document([])
    with pytest.raises(InvalidSpec, match=r"\$.component: required field missing; \$.ready: required field missing"):
        readiness.from_document({})
