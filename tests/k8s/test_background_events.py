"""`metax_k8s.events.BackgroundEvents`: the operator's Events recorded off the reconcile's path (issue 26, P1).

The recorder under it is a stand-in that blocks until the test lets it go, so each test can see what the
caller waits for and what it does not. That it records the same Events as the in-line recorder on a real
kube-apiserver is tests/contract/cluster/test_metadata.py.
"""

from __future__ import annotations

import logging
import threading

import pytest

from metax_core.errors import ClusterError
from metax_core.ports.cluster import EventType, ObjectRef
from metax_k8s.events import BackgroundEvents

REGARDING = ObjectRef("apps/v1", "DaemonSet", "metax-gpu-label", "metax-operator")


class GatedRecorder:
    """An `Events` that records only while ``gate`` is open, and fails for reasons in ``failing``."""

    def __init__(self, *, failing: frozenset[str] = frozenset()) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.recorded: list[str] = []
        self.failing = failing

    def emit(
        self,
        regarding: ObjectRef,
        *,
        reason: str,
        message: str,
        type: EventType = EventType.NORMAL,
        action: str = "Reconcile",
    ) -> None:
        self.started.set()
        assert self.gate.wait(10), "the test never opened the gate"
        if reason in self.failing:
            raise ClusterError("create", f"Event {reason}", "the API server refused it", 422)
        self.recorded.append(reason)

    def flush(self, timeout: float) -> bool:
        return True


def test_emit_returns_before_the_event_is_recorded_and_flush_waits_for_it() -> None:
    inner = GatedRecorder()
    recorder = BackgroundEvents(inner)
    recorder.emit(REGARDING, reason="Applied", message="created")
    assert inner.started.wait(5)
    assert inner.recorded == [] and not recorder.flush(0.05)
    inner.gate.set()
    assert recorder.flush(5) and inner.recorded == ["Applied"]


def test_events_are_recorded_in_the_order_they_came() -> None:
    inner = GatedRecorder()
    inner.gate.set()
    recorder = BackgroundEvents(inner)
    reasons = [f"Step{i}" for i in range(50)]
    for reason in reasons:
        recorder.emit(REGARDING, reason=reason, message="m")
    assert recorder.flush(5) and inner.recorded == reasons


def test_a_full_queue_drops_the_newest_and_counts_it(caplog: pytest.LogCaptureFixture) -> None:
    inner = GatedRecorder()
    recorder = BackgroundEvents(inner, capacity=2)
    recorder.emit(REGARDING, reason="InFlight", message="m")
    assert inner.started.wait(5)  # taken off the queue: two more fit
    with caplog.at_level(logging.WARNING):
        for reason in ("Waiting1", "Waiting2", "Dropped"):
            recorder.emit(REGARDING, reason=reason, message="m")
    assert recorder.dropped == 1 and "Event Dropped about DaemonSet metax-gpu-label not recorded" in caplog.text
    inner.gate.set()
    assert recorder.flush(5) and inner.recorded == ["InFlight", "Waiting1", "Waiting2"]


def test_an_event_the_server_refuses_is_logged_and_the_next_is_recorded(caplog: pytest.LogCaptureFixture) -> None:
    inner = GatedRecorder(failing=frozenset({"Refused"}))
    inner.gate.set()
    recorder = BackgroundEvents(inner)
    with caplog.at_level(logging.WARNING):
        recorder.emit(REGARDING, reason="Refused", message="m")
        recorder.emit(REGARDING, reason="Applied", message="m")
        assert recorder.flush(5)
    assert inner.recorded == ["Applied"]
    assert (
        "cannot record Event Refused about DaemonSet metax-gpu-label: create Event Refused failed (422)" in caplog.text
    )


def test_close_records_what_waits_then_drops_later_events() -> None:
    inner = GatedRecorder()
    recorder = BackgroundEvents(inner)
    for reason in ("A", "B"):
        recorder.emit(REGARDING, reason=reason, message="m")
    threading.Timer(0.1, inner.gate.set).start()
    assert recorder.close(5) and inner.recorded == ["A", "B"]
    recorder.emit(REGARDING, reason="Late", message="m")
    assert recorder.dropped == 1 and inner.recorded == ["A", "B"]


def test_close_within_its_grace_counts_what_it_could_not_record() -> None:
    inner = GatedRecorder()
    recorder = BackgroundEvents(inner)
    for reason in ("Stuck", "Left1", "Left2"):
        recorder.emit(REGARDING, reason=reason, message="m")
    assert inner.started.wait(5)
    assert not recorder.close(0.05)
    assert recorder.dropped == 2
    inner.gate.set()  # the one in flight still finishes; the thread then ends
    assert recorder.flush(5) and inner.recorded == ["Stuck"]
