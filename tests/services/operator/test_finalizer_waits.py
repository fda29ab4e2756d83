"""The finalizer waits for the nodes' agents before it deletes what they read (R-INSTALL).

Aspects: deleting ``cluster-operator`` puts the uninstall request on every node that runs one of our agents
(and only there), keeps driver-config, metax-vfio-config and the DaemonSets while any agent has not answered,
says so in the ``Uninstalling`` condition naming the node and the agents; once every agent answered the
cleanup runs and removes the request and the answers with every other product key; a node that never
answers holds the uninstall no longer than the bounded wait, after which an ``UninstallIncomplete`` Event
and the condition name it and the cleanup proceeds; answers to another uninstall do not count; the
uninstall's Events, recorded off the reconcile's path, are there before the object goes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness import CR_API, NS, ApiWrapper, Harness, cluster_operator, iter_events, wait_for

from metax_core.cluster import rbac
from metax_core.node import uninstall
from metax_core.wire import event_reasons


@pytest.fixture
def slow() -> Iterator[Harness]:
    h = Harness(uninstall_timeout=120.0)
    try:
        yield h
    finally:
        h.stop()


def install(h: Harness) -> None:
    h.objects.apply(cluster_operator(), field_manager="helm")
    h.start()
    wait_for("the first status", lambda: (h.cr().get("status") or {}).get("components"))
    h.pod("label-1", "gpu-1", "gpuLabel")
    h.pod("driver-1", "gpu-1", "driver")
    h.pod("exporter-1", "gpu-2", "exporter")  # no undo: gpu-2 is not asked
    h.settle()


def annotations(h: Harness, node: str) -> dict[str, str]:
    found = h.objects.get("v1", "Node", node)
    assert found is not None
    return dict(found["metadata"].get("annotations") or {})


def answer(h: Harness, node: str, agent: str, uid: str) -> None:
    h.cluster.node_metadata.patch_node_metadata(
        node, annotations=uninstall.render_done(agent, uninstall.Done(uid, ("nothing",)))
    )


def gone(h: Harness) -> bool:
    return h.objects.get(CR_API, "ClusterOperator", "cluster-operator") is None


def condition(h: Harness) -> dict[str, Any] | None:
    cr = h.objects.get(CR_API, "ClusterOperator", "cluster-operator")
    return next(
        (c for c in ((cr or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Uninstalling"), None
    )


def test_the_finalizer_waits_for_every_agent_then_cleans_up(slow: Harness) -> None:
    h = slow
    install(h)
    uid = h.cr()["metadata"]["uid"]
    h.objects.delete(CR_API, "ClusterOperator", "cluster-operator")
    wait_for("the request on gpu-1", lambda: uninstall.requested(annotations(h, "gpu-1")) == uid)
    assert uninstall.REQUEST_ANNOTATION not in annotations(h, "gpu-2")
    waiting = wait_for("the Uninstalling condition", lambda: condition(h))
    assert waiting["reason"] == "WaitingForNodes" and "gpu-1 (driver, gpu-label)" in waiting["message"]

    answer(h, "gpu-1", "gpu-label", "another-uninstall")  # not an answer to this one
    answer(h, "gpu-1", "driver", uid)
    time.sleep(0.5)
    h.settle()
    assert not gone(h)
    assert h.objects.get("v1", "ConfigMap", "driver-config", NS) is not None
    assert h.objects.get("v1", "ConfigMap", "metax-vfio-config", NS) is not None
    assert "metax-driver" in h.daemonsets()
    assert "gpu-1 (gpu-label)" in (condition(h) or {})["message"]

    answer(h, "gpu-1", "gpu-label", uid)
    wait_for("cluster-operator gone", lambda: gone(h))
    assert h.daemonsets() == set()
    assert h.objects.get("v1", "ConfigMap", "driver-config", NS) is None
    assert [k for k in annotations(h, "gpu-1") if k.startswith("metax-tech.com/")] == []
    assert list(iter_events(h, uninstall.INCOMPLETE_REASON)) == []


def test_a_node_that_never_answers_holds_the_uninstall_only_for_the_bounded_wait() -> None:
    h = Harness(uninstall_timeout=3.0)
    try:
        install(h)
        started = time.monotonic()
        h.objects.delete(CR_API, "ClusterOperator", "cluster-operator")
        wait_for("the request on gpu-1", lambda: uninstall.requested(annotations(h, "gpu-1")))
        assert not gone(h) and "metax-driver" in h.daemonsets()
        wait_for("cluster-operator gone", lambda: gone(h), timeout=30)
        assert time.monotonic() - started >= 2.0  # counted from deletionTimestamp, which has whole seconds
        events = list(iter_events(h, uninstall.INCOMPLETE_REASON))
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert "gpu-1 (driver, gpu-label)" in events[0]["note"]
        assert h.daemonsets() == set()
        assert [k for k in annotations(h, "gpu-1") if k.startswith("metax-tech.com/")] == []
    finally:
        h.stop()


def test_the_leader_lease_is_deleted_on_the_way_out_only_after_uninstall() -> None:
    h = Harness(leader_election=True)
    try:
        h.objects.apply(cluster_operator(), field_manager="helm")
        h.start()
        lease = ("coordination.k8s.io/v1", "Lease", rbac.OPERATOR_LEASE, NS)
        wait_for("the Lease", lambda: h.objects.get(*lease))
        h.stop()
        assert h.objects.get(*lease) is not None  # released, not deleted: cluster-operator is still there
        h2 = Harness(leader_election=True, cluster=h.cluster).start()
        try:
            wait_for("leading again", h2.op.leadership.is_leader)
            h.objects.delete(CR_API, "ClusterOperator", "cluster-operator")
            wait_for("cluster-operator gone", lambda: gone(h2))
        finally:
            h2.stop()
        assert h.objects.get(*lease) is None
    finally:
        h.stop()


UNINSTALL_REASONS = {uninstall.INCOMPLETE_REASON, event_reasons.CLEANED_UP}


class SlowEventsApi(ApiWrapper):
    """The in-memory API, where creating one of the uninstall's Events takes a second (a busy control plane)."""

    def create(self, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if body.get("kind") == "Event" and body.get("reason") in UNINSTALL_REASONS:
            time.sleep(1.0)
        return self.inner.create(body, **options)


def test_the_uninstall_events_are_recorded_before_the_object_goes() -> None:
    """Read straight from the server, not through `iter_events` (which waits for the recorder): without the
    finalizer's own wait, both Events were still queued behind the slow creates when the object was gone."""
    h = Harness(uninstall_timeout=1.0, api=SlowEventsApi)
    try:
        install(h)
        h.objects.delete(CR_API, "ClusterOperator", "cluster-operator")
        wait_for("cluster-operator gone", lambda: gone(h), timeout=60)
        reasons = {e["reason"] for e in h.objects.list("events.k8s.io/v1", "Event", namespace="default").items}
        assert reasons >= UNINSTALL_REASONS
    finally:
        h.stop()
