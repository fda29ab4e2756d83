"""What wakes the operator at once and what waits for the progress pace (`Settings.progress_pace`).

At 500 kwok nodes an install made 225 reconciles and 216 status writes in 123 s: every pod change, every
DaemonSet status update and the operator's own status write each queued a reconcile right after the last. Now
changes that only report progress (a status, any pod change) queue one reconcile a pace later, and the burst
behind it coalesces into it; a change to what the operator wants or owns (spec, labels, creation, deletion)
still reconciles at once. While reconciles take long, progress waits longer (`wakes.progress_delay`: five times
the last reconcile, up to 15 s), and the worker records how long each took. The queue is read directly: nothing
here depends on how fast the machine is, except that a timer is not due before its time.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from metax_core.cluster import wakes
from metax_k8s.inmemory import InMemoryCluster
from services.operator import bootstrap, run, settings

PACE = 0.3
NS = settings.Settings(identity="x").namespace


def daemonset(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "metax-driver", "namespace": NS, "resourceVersion": "1", "labels": {}},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": "a"}]}}},
        "status": dict(status),
    }


def test_a_status_or_bookkeeping_change_is_progress_and_anything_else_is_not() -> None:
    before = daemonset(numberReady=1)
    progressed = copy.deepcopy(before)
    progressed["status"]["numberReady"] = 2
    progressed["metadata"]["resourceVersion"] = "2"
    assert wakes.progress_only(before, progressed)
    relabelled = copy.deepcopy(progressed)
    relabelled["metadata"]["labels"] = {"by": "hand"}
    respecced = copy.deepcopy(progressed)
    respecced["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
    assert not wakes.progress_only(before, relabelled)
    assert not wakes.progress_only(before, respecced)
    assert not wakes.progress_only(None, before) and not wakes.progress_only(before, None)


def operator() -> run.Operator:
    s = settings.Settings(identity="op-a", leader_election=False, progress_pace=PACE)
    return bootstrap.bootstrap(s, api=InMemoryCluster().api)


def change(op: run.Operator, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """What the informer of ``kind`` does when its watch delivers the change."""
    informer = next(i for i in op.caches.all if i.kind == kind and i.namespace == NS)
    informer._on_change(old, new)  # the informer's hook, called as its watch would call it


def test_progress_waits_for_the_pace_and_a_burst_of_it_is_one_reconcile() -> None:
    op = operator()
    before = daemonset(numberReady=0)
    for ready in range(1, 50):
        after = daemonset(numberReady=ready)
        change(op, "DaemonSet", before, after)
        before = after
    assert op.queue.get(timeout=0) is None  # not at once
    assert op.queue.get(timeout=PACE * 10) == run.KEY
    op.queue.done(run.KEY)
    assert op.queue.get(timeout=PACE * 2) is None  # the other 48 changes went into that one


def test_every_pod_change_is_progress() -> None:
    op = operator()
    pod = {"metadata": {"name": "p", "namespace": NS}, "spec": {}, "status": {"ready": False}}
    change(op, "Pod", None, pod)
    change(op, "Pod", pod, None)
    assert op.queue.get(timeout=0) is None
    assert op.queue.get(timeout=PACE * 10) == run.KEY


def test_a_change_to_what_the_operator_owns_reconciles_at_once() -> None:
    op = operator()
    edited = daemonset()
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "edited-by-hand"
    change(op, "DaemonSet", daemonset(), edited)
    assert op.queue.get(timeout=0) == run.KEY
    op.queue.done(run.KEY)
    change(op, "DaemonSet", edited, None)  # deleted by hand
    assert op.queue.get(timeout=0) == run.KEY


@pytest.mark.parametrize(
    ("last_reconcile", "delay"),
    [(0.0, PACE), (0.05, PACE), (0.2, 1.0), (1.0, 5.0), (60.0, wakes.MAX_PROGRESS_DELAY)],
)
def test_progress_waits_five_times_the_last_reconcile_within_bounds(last_reconcile: float, delay: float) -> None:
    assert wakes.progress_delay(PACE, last_reconcile) == pytest.approx(delay)


def test_after_a_slow_reconcile_progress_waits_longer_and_a_spec_change_does_not() -> None:
    op = operator()
    slow = 0.2  # five times that is 1.0 s, over three times the pace
    op.reconciler.reconcile = lambda: time.sleep(slow)  # type: ignore[method-assign,func-returns-value]
    op.start()
    try:
        op.queue.add(run.KEY)
        deadline = time.monotonic() + 10
        while op.completed < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert op.pace.last_reconcile >= slow
    finally:
        op.stop()
    op = operator()
    op.pace.last_reconcile = slow
    change(op, "DaemonSet", daemonset(numberReady=0), daemonset(numberReady=1))
    assert op.queue.get(timeout=PACE * 2) is None  # the pace alone would be due by now
    assert op.queue.get(timeout=5) == run.KEY
    op.queue.done(run.KEY)
    respecced = daemonset(numberReady=1)
    respecced["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
    change(op, "DaemonSet", daemonset(numberReady=1), respecced)
    assert op.queue.get(timeout=0) == run.KEY
