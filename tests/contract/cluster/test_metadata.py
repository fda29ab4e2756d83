"""The cluster port contract for node metadata, events and leases.

Every test runs twice: ``[inmemory]`` on every test run, ``[real]`` (marked ``integration``) against the
test control plane's kube-apiserver through `client.HttpApi` (the ``cluster`` fixture in conftest.py). Where
the two differ, the in-memory server is wrong. Aspects covered:

- node labels/annotations: ours change, everybody else's stay;
- events: dedup into series.count, concurrent emitters, a fresh event after the window;
- leader election: one leader at a time under random schedules and under a real race.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from metax_core.errors import ClusterError, NotFound
from metax_core.ports.cluster import EventType, ObjectRef
from metax_k8s import events, retry
from tests.support.cluster import Cluster, event_list

# -- node metadata -------------------------------------------------------------------------------------------


def test_node_patches_touch_only_our_keys(cluster: Cluster) -> None:
    node = cluster.add_node(
        labels={"kubernetes.io/hostname": "h1", "metax-tech.com/gpu.product": "old"},
        annotations={"other.io/note": "keep"},
    )
    ours = cluster.node_metadata()
    ours.patch_node_metadata(
        node,
        labels={"metax-tech.com/gpu.product": "C500", "metax-tech.com/gpu.count": "8"},
        annotations={"metax-tech.com/gpu-vfio": '{"0":1}'},
    )
    cluster.api.merge_patch("v1", "Node", node, {"metadata": {"labels": {"team": "ml"}}}, field_manager="admin")
    ours.patch_node_metadata(node, labels={"metax-tech.com/gpu.count": None, "metax-tech.com/never-set": None})
    result = ours.get_node(node)
    assert result is not None
    labels, annotations = result["metadata"]["labels"], result["metadata"]["annotations"]
    # Controllers may add their own keys too (kube-controller-manager's TTL annotation): all left alone.
    assert {k: v for k, v in labels.items() if k.startswith("metax-tech.com/")} == {
        "metax-tech.com/gpu.product": "C500"
    }
    assert labels["kubernetes.io/hostname"] == "h1" and labels["team"] == "ml"
    assert annotations["other.io/note"] == "keep" and annotations["metax-tech.com/gpu-vfio"] == '{"0":1}'
    assert not [k for k in annotations if k.startswith("metax-tech.com/") and k != "metax-tech.com/gpu-vfio"]


def test_node_patch_errors(cluster: Cluster) -> None:
    ours = cluster.node_metadata()
    assert ours.get_node("no-such-node") is None
    with pytest.raises(NotFound):
        ours.patch_node_metadata("no-such-node", labels={"metax-tech.com/gpu.count": "1"})
    node = cluster.add_node()
    with pytest.raises(ClusterError, match="metadata.labels") as caught:
        ours.patch_node_metadata(node, labels={"metax-tech.com/gpu.product": "not a valid value!"})
    assert caught.value.status == 422


# -- events --------------------------------------------------------------------------------------------------


def test_repeated_events_become_one_series(cluster: Cluster) -> None:
    recorder = cluster.events()
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    for _ in range(3):
        recorder.emit(regarding, reason="BadValue", message="vfnum must be 1..16", type=EventType.WARNING)
        cluster.clock.advance(30)
    recorder.emit(regarding, reason="BadValue", message="another problem", type=EventType.WARNING)
    found = sorted(event_list(cluster), key=lambda e: e["note"])
    assert [(e["note"], (e.get("series") or {}).get("count", 1)) for e in found] == [
        ("another problem", 1),
        ("vfnum must be 1..16", 3),
    ]
    assert found[1]["regarding"]["name"] == "driver-config" and found[1]["type"] == "Warning"


def test_a_repeat_after_the_window_starts_a_new_event(cluster: Cluster) -> None:
    recorder = cluster.events()
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    recorder.emit(regarding, reason="Applied", message="ok")
    recorder.emit(regarding, reason="Applied", message="ok")
    cluster.clock.advance(recorder.window.total_seconds() + 1)
    recorder.emit(regarding, reason="Applied", message="ok")
    (only,) = event_list(cluster)
    assert "series" not in only and only["eventTime"].startswith(cluster.clock.now.strftime("%Y-%m-%dT%H:%M:%S"))


def test_concurrent_emitters_never_lose_a_count(cluster: Cluster) -> None:
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    recorders = [
        cluster.events(f"replica-{i}", policy=retry.RetryPolicy(attempts=30, base_delay=0.01, max_delay=0.1))
        for i in range(2)
    ]
    start = threading.Barrier(len(recorders))

    def emit_five(recorder: Any) -> None:
        start.wait()
        for _ in range(5):
            recorder.emit(regarding, reason="Flapping", message="same thing again")

    threads = [threading.Thread(target=emit_five, args=(r,)) for r in recorders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    (only,) = event_list(cluster)
    assert only["series"]["count"] == 10


def test_events_about_cluster_scoped_objects_go_to_default(cluster: Cluster) -> None:
    node = cluster.add_node()
    cluster.events().emit(
        ObjectRef("v1", "Node", node),
        reason="NodeNeedReboot",
        message="firmware upgrade done, need reboot machine to take effect",
    )
    mine = [e for e in event_list(cluster, "default") if e["regarding"]["name"] == node]
    assert [(e["reason"], e["regarding"]["kind"]) for e in mine] == [("NodeNeedReboot", "Node")]
    assert event_list(cluster) == []


def test_background_events_arrive_in_order_and_still_become_one_series(cluster: Cluster) -> None:
    """What the operator records through `events.BackgroundEvents` reaches the server as if emitted in line."""
    recorder = events.BackgroundEvents(cluster.events())
    first = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    second = ObjectRef("v1", "ConfigMap", "vfio-config", cluster.namespace)
    for regarding in (first, second, first):
        recorder.emit(regarding, reason="Applied", message="applied")
    assert recorder.close(30.0) and recorder.dropped == 0
    found = {e["regarding"]["name"]: e for e in event_list(cluster)}
    assert sorted(found) == ["driver-config", "vfio-config"]
    assert found["driver-config"]["series"]["count"] == 2 and "series" not in found["vfio-config"]


# -- leader election -----------------------------------------------------------------------------------------


def test_lease_acquire_renew_release(cluster: Cluster) -> None:
    a, b = cluster.lease("operator-a"), cluster.lease("operator-b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    cluster.clock.advance(10)
    assert a.try_acquire_or_renew() is True
    cluster.clock.advance(10)
    assert b.try_acquire_or_renew() is False  # renewed 10 s ago: still a's
    a.release()
    assert b.try_acquire_or_renew() is True
    assert a.try_acquire_or_renew() is False
    held = cluster.objects().get("coordination.k8s.io/v1", "Lease", "metax-operator", cluster.namespace)
    assert held is not None and held["spec"]["holderIdentity"] == "operator-b"


def test_an_expired_lease_is_taken_over_and_the_old_leader_learns_it(cluster: Cluster) -> None:
    a, b = cluster.lease("operator-a"), cluster.lease("operator-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    cluster.clock.advance(a.lease_duration + 1)
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()
    assert a.valid_until is None and b.valid_until is not None


def test_two_candidates_never_lead_at_once_under_random_schedules(cluster: Cluster) -> None:
    rng = random.Random(20240601)
    candidates = [cluster.lease(f"operator-{i}", lease_duration=15) for i in range(3)]
    last_success: dict[str, float] = {}
    for _ in range(60):
        cluster.clock.advance(rng.choice([0.5, 2, 5, 9, 16]))
        candidate = rng.choice(candidates)
        if rng.random() < 0.1:
            candidate.release()
            last_success.pop(candidate.identity, None)
            continue
        if candidate.try_acquire_or_renew():
            now = cluster.clock.monotonic()
            for other, when in last_success.items():
                assert other == candidate.identity or now >= when + 15, (
                    f"{candidate.identity} leads while {other} renewed at {when}"
                )
            last_success = {candidate.identity: now}


def test_a_real_race_for_a_free_lease_has_one_winner(cluster: Cluster) -> None:
    for round_ in range(5):
        candidates = [cluster.lease(f"racer-{round_}-{i}", name=f"race-{round_}") for i in range(3)]
        start = threading.Barrier(len(candidates))
        results: dict[str, bool] = {}

        def run(lock: Any, start: threading.Barrier = start, results: dict[str, bool] = results) -> None:
            start.wait()
            results[lock.identity] = lock.try_acquire_or_renew()

        threads = [threading.Thread(target=run, args=(c,)) for c in candidates]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sum(results.values()) == 1, results
