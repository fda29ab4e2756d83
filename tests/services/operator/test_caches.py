"""What the operator's caches and watches keep, so that its memory stays small at 1,000 nodes (issue 11, P3).

Aspects covered:

- a node is cached as its name, the product's labels and the keys of the product's annotations only;
- a pod is cached as the fields the reconcile reads (node, component, revision, phase, Ready, restarts,
  waiting reasons; the deletion time when set; creation and start times of the driver's pods only), nothing of
  its spec or other status;
- equal parts of cached objects are one dict (a fleet's pods share labels and status, a node's pods their
  spec; a driver pod's status is its own, for its start time), each object still reads its own values, and the
  table of shared parts stays bounded;
- the informer's initial list is slimmed item by item (the transform), and so are watched changes;
- the pod cache is filed by component (its label) and the index follows every add, relabel and delete;
- the node cache files only the nodes with a GPU health report or condition, as they gain and lose them;
- a watch remembers only the resourceVersion of what it delivered: a DELETED event made up after a 410
  relist carries apiVersion, kind, name, namespace and the last resourceVersion delivered, not the object;
- the busy-node list keeps one small record per GPU workload pod and drops every other pod (R-ROLLOUT);
- the real adapter's watch decoding splits lines across chunks of any size, and drops a line cut short.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from harness import NS, wait_for

from metax_core.cluster import gpu_nodes, wakes, workloads
from metax_core.health import report as health_report
from metax_core.ports.cluster import WatchEvent, WatchEventType
from metax_k8s import objects, responses, retry
from metax_k8s.inmemory import InMemoryCluster
from services.operator import caches, informers, rollout_driver

BIG = "x" * 4096


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {workloads.GPU_NODE_LABEL: "true", "kubernetes.io/hostname": name, "zone": "a"},
            "annotations": {"metax-tech.com/node-gpu-devices": BIG, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"images": [{"names": [BIG]}], "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, node: str, component: str = "driver") -> dict[str, Any]:
    labels = {workloads.COMPONENT_LABEL: component, "controller-revision-hash": "abc", "pod-template-generation": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": labels,
            "annotations": {"metax-tech.com/driver-revision": "r1", "kubectl.kubernetes.io/note": BIG},
            "ownerReferences": [{"kind": "DaemonSet", "name": "metax-driver", "controller": True}],
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": BIG}}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": BIG}]},
        "status": {
            "phase": "Running",
            "startTime": "2026-01-01T00:00:01Z",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": BIG}}},
                {"restartCount": 1, "state": {"running": {}}},
            ],
        },
    }


def test_a_cached_node_is_its_name_its_product_labels_and_the_keys_of_its_product_annotations() -> None:
    slim = informers.slim_node(_node("gpu-1"))
    assert slim == {
        "metadata": {
            "name": "gpu-1",
            "labels": {workloads.GPU_NODE_LABEL: "true"},
            "annotations": {"metax-tech.com/node-gpu-devices": ""},
        }
    }
    assert wakes.gpu_labels(slim) == {workloads.GPU_NODE_LABEL: "true"}


def test_a_cached_pod_keeps_what_the_rollout_and_the_status_read_and_nothing_else() -> None:
    slim = informers.slim_pod(_pod("d1", "gpu-1"))
    assert slim == {
        "metadata": {
            "name": "d1",
            "namespace": NS,
            "labels": {workloads.COMPONENT_LABEL: "driver", "controller-revision-hash": "abc"},
            "annotations": {"metax-tech.com/driver-revision": "r1"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "gpu-1"},
        "status": {
            "phase": "Running",
            "ready": False,
            "restarts": 3,
            "waiting": ("CrashLoopBackOff",),
            "startTime": "2026-01-01T00:00:01Z",
        },
    }
    assert BIG not in repr(slim)
    assert rollout_driver.is_driver_pod(slim)


def test_a_cached_pod_of_another_component_has_no_times_and_one_of_a_few_shared_statuses() -> None:
    """Only the rollout reads a pod's creation and start times, of the driver's pods (`fleet.TIMED_COMPONENTS`)."""
    pod = _pod("l1", "gpu-1", component="gpu-label")
    pod["metadata"]["annotations"] = {"kubectl.kubernetes.io/note": BIG}
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    slim = informers.slim_pod(pod)
    assert slim["metadata"] == {
        "name": "l1",
        "namespace": NS,
        "labels": {workloads.COMPONENT_LABEL: "gpu-label", "controller-revision-hash": "abc"},
        "deletionTimestamp": "2026-01-01T00:01:00Z",
    }
    assert slim["status"] == {"phase": "Running", "ready": False, "restarts": 3, "waiting": ("CrashLoopBackOff",)}
    later = _pod("l2", "gpu-2", component="gpu-label")
    later["status"]["startTime"] = "2026-01-01T00:09:09Z"
    assert informers.slim_pod(later)["status"] is slim["status"]
    assert not rollout_driver.is_driver_pod(slim)


def test_equal_parts_of_cached_pods_and_nodes_are_one_dict_and_each_reads_its_own_values() -> None:
    first, second, elsewhere = (
        informers.slim_pod(_pod(n, node)) for n, node in [("d1", "g1"), ("d2", "g1"), ("d3", "g2")]
    )
    for part in ("labels", "annotations"):
        assert first["metadata"][part] is second["metadata"][part] is elsewhere["metadata"][part]
    assert first["status"] == second["status"] and first["status"] is not second["status"]  # driver: start times
    labellers = [informers.slim_pod(_pod(n, "g1", component="gpu-label")) for n in ("l1", "l2")]
    assert labellers[0]["status"] is labellers[1]["status"]
    assert first["spec"]["nodeName"] is second["spec"]["nodeName"]  # one string per node name
    assert (first["spec"]["nodeName"], elsewhere["spec"]["nodeName"]) == ("g1", "g2")
    assert [p["metadata"]["name"] for p in (first, second, elsewhere)] == ["d1", "d2", "d3"]
    crashing = _pod("d4", "g1")
    crashing["status"]["containerStatuses"][0]["restartCount"] = 7
    assert informers.slim_pod(crashing)["status"]["restarts"] == 8 and first["status"]["restarts"] == 3
    assert (
        informers.slim_node(_node("gpu-1"))["metadata"]["labels"]
        is informers.slim_node(_node("gpu-2"))["metadata"]["labels"]
    )


def test_the_table_of_shared_parts_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informers, "SHARED_LIMIT", 50)
    monkeypatch.setattr(informers, "_SHARED", {})
    slims = [informers.slim_pod(_pod(f"d{i}", f"node-{i}")) for i in range(500)]  # 500 distinct specs
    assert len(informers._SHARED) <= 50
    assert [p["spec"]["nodeName"] for p in slims] == [f"node-{i}" for i in range(500)]


def test_the_informer_keeps_slim_copies_from_its_list_and_from_its_watch() -> None:
    cluster = InMemoryCluster()
    cluster.api.create(_node("gpu-1"))
    changes: list[tuple[Any, Any]] = []
    informer = informers.Informer(
        cluster.objects,
        "v1",
        "Node",
        slim=informers.slim_node,
        on_change=lambda old, new: changes.append((old, new)),
        watch_seconds=5,
    )
    informer.start()
    try:
        assert informer.synced.wait(10)
        assert informer.get("gpu-1") == informers.slim_node(_node("gpu-1"))
        cluster.api.create(_node("gpu-2"))
        wait_for("gpu-2 cached", lambda: informer.get("gpu-2"))
        assert informer.get("gpu-2") == informers.slim_node(_node("gpu-2"))
        assert [new["metadata"]["name"] for _, new in changes] == ["gpu-1", "gpu-2"]
    finally:
        informer.stop()


def test_the_pod_cache_files_each_pod_under_its_component_as_it_changes() -> None:
    """`caches.Caches.pods_of` reads the index, not every cached pod: it must follow every change."""
    cluster = InMemoryCluster()
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    informer = informers.Informer(
        cluster.objects, "v1", "Pod", namespace=NS, slim=informers.slim_pod, index_by=caches.component_of
    )
    for name, node in [("d1", "g1"), ("d2", "g2")]:
        cluster.api.create(_pod(name, node))

    def filed() -> dict[str, list[str]]:
        return {c: sorted(p["metadata"]["name"] for p in informer.indexed(c)) for c in ("driver", "gpu-device", "")}

    informer.start()
    try:
        assert informer.synced.wait(10)
        assert filed() == {"driver": ["d1", "d2"], "gpu-device": [], "": []}
        # Filed by name alone (one namespace): found in it, and only in it.
        assert (informer.get("d2", NS) or {}).get("spec") == {"nodeName": "g2"}
        assert informer.get("d2") is None and informer.get("d2", "elsewhere") is None
        moved = _pod("d2", "g2")
        moved["metadata"]["labels"][workloads.COMPONENT_LABEL] = "gpu-device"
        cluster.api.replace({**moved, "metadata": {**moved["metadata"], "resourceVersion": None}})
        wait_for("d2 refiled", lambda: filed()["gpu-device"] == ["d2"])
        assert filed() == {"driver": ["d1"], "gpu-device": ["d2"], "": []}
        cluster.api.delete("v1", "Pod", "d1", NS)
        wait_for("d1 gone", lambda: filed()["driver"] == [])
        unlabelled = _pod("u", "g1")
        del unlabelled["metadata"]["labels"][workloads.COMPONENT_LABEL]
        cluster.api.create(unlabelled)
        wait_for("u filed", lambda: filed()[""] == ["u"])
        everything = sorted(p["metadata"]["name"] for p in informer.items())
        assert everything == sorted(n for names in filed().values() for n in names) == ["d2", "u"]
    finally:
        informer.stop()


def test_the_pod_cache_tallies_its_pods_readiness_by_node_as_they_change() -> None:
    """``readyNodes`` reads `caches.Caches.pod_readiness_by_node`, the tally, not every cached pod: a node counts
    while every pod of ours on it is Ready."""
    cluster = InMemoryCluster()
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    informer = informers.Informer(
        cluster.objects, "v1", "Pod", namespace=NS, slim=informers.slim_pod, tally_by=gpu_nodes.readiness_on_node
    )

    def ready(name: str, is_ready: bool) -> None:
        condition = {"type": "Ready", "status": "True" if is_ready else "False"}
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}
        cluster.objects.apply_status({**body, "status": {"conditions": [condition]}}, field_manager="kubelet")

    def ready_nodes() -> set[str]:
        return {n for n in ("g1", "g2") if gpu_nodes.ready_count([n], informer.tallied())}

    for name, node in [("d1", "g1"), ("l1", "g1"), ("d2", "g2")]:
        cluster.api.create(_pod(name, node))
    informer.start()
    try:
        assert informer.synced.wait(10) and informer.tallied() == {("g1", False), ("g2", False)}
        ready("d1", True)
        wait_for("d1 ready, l1 not yet", lambda: informer.tallied() == {("g1", True), ("g1", False), ("g2", False)})
        assert ready_nodes() == set()
        ready("l1", True)
        ready("d2", True)
        wait_for("every node ready", lambda: ready_nodes() == {"g1", "g2"})
        ready("d1", False)  # one pod of ours on g1 not Ready: g1 is not
        wait_for("g1 not ready", lambda: ready_nodes() == {"g2"})
        cluster.api.delete("v1", "Pod", "d1", NS)  # what is left on g1 is Ready
        wait_for("g1 ready again", lambda: ready_nodes() == {"g1", "g2"})
        cluster.api.delete("v1", "Pod", "l1", NS)  # no pod of ours on g1 at all
        wait_for("g1 without pods", lambda: informer.tallied() == {("g2", True)})
        assert ready_nodes() == {"g2"}
    finally:
        informer.stop()


def test_the_node_cache_files_only_the_nodes_that_say_something_about_gpu_health() -> None:
    """GPU health reads `caches.Caches.health_nodes`: a node with a report or the condition, until it has neither."""
    informer = informers.Informer(
        InMemoryCluster().objects, "v1", "Node", slim=informers.slim_node, index_by=caches.health_of
    )

    def node(report_text: str | None, condition: bool) -> dict[str, Any]:
        body = _node("gpu-1")
        if report_text is not None:
            body["metadata"]["annotations"][health_report.ANNOTATION] = report_text
        if condition:
            body["status"]["conditions"].append({"type": health_report.CONDITION_TYPE, "status": "True"})
        return body

    def filed() -> list[str]:
        return [n["metadata"]["name"] for n in informer.indexed(caches.HEALTH)]

    informer._apply(WatchEventType.ADDED, node(None, condition=False))
    assert filed() == [] and informer.get("gpu-1") is not None
    informer._apply(WatchEventType.MODIFIED, node("{}", condition=False))
    assert filed() == ["gpu-1"]
    informer._apply(WatchEventType.MODIFIED, node(None, condition=True))  # a stale condition, to be removed
    assert filed() == ["gpu-1"]
    informer._apply(WatchEventType.MODIFIED, node(None, condition=False))
    assert filed() == []
    informer._apply(WatchEventType.MODIFIED, node("{}", condition=True))
    informer._apply(WatchEventType.DELETED, node("{}", condition=True))
    assert filed() == [] and informer.items() == []


class GatedSleep:
    """A retry sleep that holds the watch away from the server until the test lets it go."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.go = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.waiting.set()
        self.go.wait(10)


def test_a_deletion_found_by_a_relist_is_reported_with_the_identity_the_watch_kept() -> None:
    cluster = InMemoryCluster()
    api = cluster.api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name in ("goes", "stays"):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}
        api.create({**cm, "metadata": {**cm["metadata"], "labels": {"a": "b"}}, "data": {"big": BIG}})
    sleep = GatedSleep()
    watcher = objects.K8sObjects(api, policy=retry.RetryPolicy(attempts=30, base_delay=0.01, sleep=sleep))
    events: list[WatchEvent] = []
    stream = watcher.watch("v1", "ConfigMap", NS, timeout_seconds=30)

    def collect() -> None:
        for event in stream:
            events.append(event)

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    wait_for("both listed", lambda: len([e for e in events if e.type is WatchEventType.ADDED]) == 2)
    api.restart()  # the stream breaks; the watch waits in its back-off, away from the server
    assert sleep.waiting.wait(10)
    last = api.get("v1", "ConfigMap", "goes", NS)["metadata"]["resourceVersion"]
    api.delete("v1", "ConfigMap", "goes", NS)
    api.compact()  # the version it resumes from is gone: 410, relist
    sleep.go.set()
    deleted = wait_for("goes deleted", lambda: [e for e in events if e.type is WatchEventType.DELETED])
    assert len(deleted) == 1
    gone = deleted[0].object
    assert gone["apiVersion"] == "v1" and gone["kind"] == "ConfigMap"
    assert gone["metadata"]["name"] == "goes" and gone["metadata"]["namespace"] == NS
    assert gone["metadata"] == {"name": "goes", "namespace": NS, "resourceVersion": last}
    assert "data" not in gone


def test_an_informer_whose_version_expired_relists_from_its_own_cache(caplog: pytest.LogCaptureFixture) -> None:
    """The informer's watch does not relist itself (``relist=False``: no second index of every object's version);
    the informer does, against its cache: an object deleted while its watch was away leaves the cache."""
    caplog.set_level("INFO")
    cluster = InMemoryCluster()
    api = cluster.api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name in ("goes", "stays"):
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}})
    sleep = GatedSleep()
    watcher = objects.K8sObjects(api, policy=retry.RetryPolicy(attempts=30, base_delay=0.01, sleep=sleep))
    changes: list[tuple[Any, Any]] = []
    informer = informers.Informer(
        watcher, "v1", "ConfigMap", namespace=NS, on_change=lambda old, new: changes.append((old, new))
    )
    informer.start()
    try:
        assert informer.synced.wait(10)
        api.restart()  # the stream breaks; the watch waits in its back-off, away from the server
        assert sleep.waiting.wait(10)
        api.delete("v1", "ConfigMap", "goes", NS)
        api.compact()  # the version it resumes from is gone: 410, raised to the informer
        sleep.go.set()
        wait_for("goes uncached", lambda: informer.get("goes", NS) is None)
        assert informer.get("stays", NS) is not None
        assert [(old["metadata"]["name"], new) for old, new in changes if new is None] == [("goes", None)]
        relisted = [r for r in caplog.records if "too old resource version" in r.getMessage()]
        assert relisted and {r.name for r in relisted} == {informers.__name__}
    finally:
        informer.stop()


class ChunkedResponse:
    """What `responses.watch_events` reads: a urllib3 response streaming fixed chunks."""

    def __init__(self, data: bytes, size: int) -> None:
        self.chunks = [data[i : i + size] for i in range(0, len(data), size)]
        self.released = False

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


def test_watch_lines_are_decoded_whatever_the_chunk_boundaries() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": f"cm-{i}", "resourceVersion": str(i)}, "data": {"x": BIG}}}
        for i in range(5)
    ]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b"\n" + b'{"type": "ADDED", "obj'
    for size in (1, 7, 4096, 64 * 1024):
        response = ChunkedResponse(data, size)
        events = list(responses.watch_events(response, "ConfigMap (all)"))  # type: ignore[arg-type]
        assert [e.object["metadata"]["name"] for e in events] == [f"cm-{i}" for i in range(5)], size
        assert all(e.type is WatchEventType.ADDED for e in events)
        assert response.released


def test_an_error_line_in_a_watch_is_the_port_error_for_its_code() -> None:
    data = b'{"type": "ERROR", "object": {"code": 410, "message": "too old resource version: 1 (5)"}}\n'
    response = ChunkedResponse(data, 10)
    with pytest.raises(retry.Gone, match="too old resource version: 1"):
        list(responses.watch_events(response, "ConfigMap (all)"))  # type: ignore[arg-type]
    assert response.released


def test_an_informer_of_a_kind_the_cluster_does_not_serve_is_synced_empty_and_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DeviceClasses (R-DRA) on a Kubernetes before 1.34: the operator's informer must not hold its start-up
    (run waits for every informer to sync) nor warn every second."""
    cluster = InMemoryCluster()
    informer = informers.Informer(cluster.objects, "widgets.example.com/v1", "Widget", watch_seconds=5)
    with caplog.at_level("INFO", logger="services.operator.informers"):
        informer.start()
        try:
            assert informer.synced.wait(10)
            assert informer.items() == []
            assert informer.get("anything") is None
        finally:
            informer.stop()
    said = [r for r in caplog.records if "Widget" in r.getMessage()]
    assert [r.levelname for r in said] == ["INFO"], [r.getMessage() for r in said]
