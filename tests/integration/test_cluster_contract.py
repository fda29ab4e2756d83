"""The cluster port contract, run against the in-memory API server and the real kube-apiserver.

Every test runs twice: ``[inmemory]`` on every test run, ``[real]`` (marked ``integration``) against the
test control plane's kube-apiserver through `client.HttpApi`. Where the two differ, the in-memory server
is wrong. Aspects covered:

- server-side apply: ownership per field manager, conflicts without force, force, removal of fields a
  manager stops applying, no-op applies, dry runs, the status subresource and metadata.generation;
- errors: NotFound, AlreadyExists, stale resourceVersion, unknown kinds, missing namespaces;
- schema admission of a custom kind: enum, int-or-string, unknown fields (strict), defaults;
- label selectors (equality and set-based) and field selectors (metadata.name, spec.nodeName);
- node labels/annotations: ours change, everybody else's stay;
- events: dedup into series.count, concurrent emitters, a fresh event after the window;
- leader election: one leader at a time under random schedules and under a real race;
- watches: initial list, live changes, selector moves, 410 relist, API server restart, client deadline;
- retries: 429 with Retry-After, 5xx, lost answers, 409 on read-modify-write, none on apply conflicts.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_helpers import (
    WIDGET_API,
    WIDGET_CRD,
    Cluster,
    FaultProxy,
    RecordingSleep,
    WatchCollector,
    named,
    new_namespace,
    wait_served,
)
from metax_core.errors import ClusterError, Conflict, NotFound
from metax_dev.controlplane import ControlPlane
from metax_core.ports.cluster import EventType, ObjectRef, WatchEventType
from metax_core import converter, spec
from metax_k8s import client, crd, retry
from metax_k8s.inmemory import InMemoryApiServer


@pytest.fixture(scope="session")
def real_api(control_plane: ControlPlane) -> client.HttpApi:
    api = client.HttpApi(client.api_client(control_plane.kubeconfig_path))
    api.apply(WIDGET_CRD, field_manager="contract-tests", force=True)
    wait_served(api, WIDGET_API, "Widget")
    return api


@pytest.fixture(params=["inmemory", pytest.param("real", marks=pytest.mark.integration)])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    proxies: list[FaultProxy] = []
    if request.param == "inmemory":
        server = InMemoryApiServer()
        server.apply(WIDGET_CRD, field_manager="contract-tests", force=True)
        result = Cluster(
            "inmemory", server, new_namespace(server), restart=server.restart, compact=server.compact, faulty=lambda: (server, server)
        )
    else:
        control_plane: ControlPlane = request.getfixturevalue("control_plane")
        api: client.HttpApi = request.getfixturevalue("real_api")

        def faulty() -> tuple[client.Api, FaultProxy]:
            proxy = FaultProxy(api.client)
            proxies.append(proxy)
            return proxy.api(), proxy

        result = Cluster(
            "real",
            api,
            new_namespace(api),
            restart=control_plane.restart_apiserver,
            # The watch cache forgets its history when kube-apiserver restarts (etcd compaction alone does
            # not expire versions the cache still serves), so that is how versions expire for real.
            compact=control_plane.restart_apiserver,
            faulty=faulty,
        )
    yield result
    for cleanup in result.cleanups:
        cleanup()
    for proxy in proxies:
        proxy.close()
    try:
        result.api.delete("v1", "Namespace", result.namespace)
    except ClusterError:
        pass


CO_API = f"{spec.API_GROUP}/{spec.API_VERSION}"


def fast_policy(**options: Any) -> retry.RetryPolicy:
    options.setdefault("sleep", RecordingSleep())
    return retry.RetryPolicy(base_delay=0.05, max_delay=0.2, **options)


def widget(cluster: Cluster, name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": WIDGET_API, "kind": "Widget", "metadata": {"name": name, "namespace": cluster.namespace}}
    if spec is not None:
        body["spec"] = spec
    if status is not None:
        body["status"] = status
    return body


def managers_of(obj: dict[str, Any]) -> set[str]:
    return {entry["manager"] for entry in obj["metadata"].get("managedFields", [])}


# -- server-side apply ----------------------------------------------------------------------------------


def test_apply_creates_and_an_identical_apply_changes_nothing(cluster: Cluster) -> None:
    objects = cluster.objects()
    first = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    again = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    assert first["data"] == {"a": "1"}
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert managers_of(again) == {"operator"}


def test_fields_of_another_manager_are_not_clobbered(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"ours": "1"}, labels={"app": "metax"}), field_manager="operator")
    objects.apply(cluster.configmap("cm", {"theirs": "x"}, labels={"team": "gpu"}), field_manager="admin")
    result = objects.apply(cluster.configmap("cm", {"ours": "2"}, labels={"app": "metax"}), field_manager="operator")
    assert result["data"] == {"ours": "2", "theirs": "x"}
    assert result["metadata"]["labels"] == {"app": "metax", "team": "gpu"}
    assert managers_of(result) == {"operator", "admin"}


def test_a_field_owned_by_another_manager_conflicts_unless_forced(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"mode": "sgpu"}), field_manager="admin")
    with pytest.raises(Conflict, match=r'conflict.*"admin"') as caught:
        objects.apply(cluster.configmap("cm", {"mode": "native"}), field_manager="operator")
    assert caught.value.status == 409
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace)["data"] == {"mode": "sgpu"}  # type: ignore[index]
    same_value = objects.apply(cluster.configmap("cm", {"mode": "sgpu"}), field_manager="operator")
    assert same_value["data"] == {"mode": "sgpu"}  # the same value is shared ownership, not a conflict
    forced = objects.apply(cluster.configmap("cm", {"mode": "native"}), field_manager="operator", force=True)
    assert forced["data"] == {"mode": "native"}


def test_fields_a_manager_stops_applying_are_removed_unless_someone_else_owns_them(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"a": "1", "b": "2", "shared": "s"}), field_manager="operator")
    objects.apply(cluster.configmap("cm", {"shared": "s"}), field_manager="admin")
    result = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    assert result["data"] == {"a": "1", "shared": "s"}


def test_a_write_by_someone_else_takes_the_field_over(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"mode": "sgpu", "other": "1"}), field_manager="operator")
    cluster.api.merge_patch("v1", "ConfigMap", "cm", {"data": {"mode": "native"}}, namespace=cluster.namespace, field_manager="kubectl-edit")
    with pytest.raises(Conflict, match='conflict with "kubectl-edit"'):
        objects.apply(cluster.configmap("cm", {"mode": "sgpu", "other": "1"}), field_manager="operator")
    kept = objects.apply(cluster.configmap("cm", {"mode": "native", "other": "2"}), field_manager="operator")
    assert kept["data"] == {"mode": "native", "other": "2"}


def test_finalizers_hold_a_deleted_object_until_removed(cluster: Cluster) -> None:
    objects = cluster.objects()
    body = cluster.configmap("cm", {"a": "1"})
    body["metadata"]["finalizers"] = ["metax-tech.com/cleanup"]
    objects.apply(body, field_manager="operator")
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=30))
    watch.wait_for(named("ADDED", "cm"))
    assert objects.delete("v1", "ConfigMap", "cm", cluster.namespace) is True
    held = objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    watch.wait_for(lambda e: named("MODIFIED", "cm")(e) and bool(e.object["metadata"].get("deletionTimestamp")))
    objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    watch.wait_for(named("DELETED", "cm"))
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace) is None


def test_dry_run_apply_admits_without_storing(cluster: Cluster) -> None:
    objects = cluster.objects()
    preview = objects.apply(widget(cluster, "w", {"color": "red"}), field_manager="operator", dry_run=True)
    assert preview["spec"] == {"color": "red", "size": 1}
    assert objects.get(WIDGET_API, "Widget", "w", cluster.namespace) is None


def test_status_subresource_is_written_apart_from_the_spec(cluster: Cluster) -> None:
    objects = cluster.objects()
    created = objects.apply(widget(cluster, "w", {"size": 2}, status={"phase": "ignored"}), field_manager="operator")
    assert "status" not in created and created["metadata"]["generation"] == 1
    with_status = objects.apply_status(widget(cluster, "w", status={"phase": "Ready", "ready": 2}), field_manager="operator-status")
    assert with_status["status"] == {"phase": "Ready", "ready": 2}
    assert with_status["spec"]["size"] == 2 and with_status["metadata"]["generation"] == 1
    changed = objects.apply(widget(cluster, "w", {"size": 3}), field_manager="operator")
    assert changed["metadata"]["generation"] == 2 and changed["status"]["phase"] == "Ready"


# -- errors -----------------------------------------------------------------------------------------------


def test_missing_objects_and_duplicates(cluster: Cluster) -> None:
    objects = cluster.objects()
    assert objects.get("v1", "ConfigMap", "nope", cluster.namespace) is None
    assert objects.delete("v1", "ConfigMap", "nope", cluster.namespace) is False
    cluster.api.create(cluster.configmap("cm", {}), field_manager="test")
    with pytest.raises(Conflict, match="already exists"):
        cluster.api.create(cluster.configmap("cm", {}), field_manager="test")
    assert objects.delete("v1", "ConfigMap", "cm", cluster.namespace) is True
    with pytest.raises(NotFound, match="not found"):
        cluster.api.merge_patch("v1", "ConfigMap", "cm", {"data": {"a": "1"}}, namespace=cluster.namespace)


def test_a_stale_resource_version_is_a_conflict(cluster: Cluster) -> None:
    created = cluster.api.create(cluster.configmap("cm", {"a": "1"}), field_manager="test")
    cluster.api.merge_patch("v1", "ConfigMap", "cm", {"data": {"a": "2"}}, namespace=cluster.namespace)
    stale = {**created, "data": {"a": "3"}}
    with pytest.raises(Conflict, match="has been modified"):
        cluster.api.replace(stale, field_manager="test")


def test_unknown_kinds_and_missing_namespaces_are_refused(cluster: Cluster) -> None:
    objects = cluster.objects()
    with pytest.raises(ClusterError, match="does not serve"):
        objects.list("example.com/v1", "Nothing")
    with pytest.raises(NotFound, match='namespaces "no-such-namespace" not found'):
        objects.apply({**cluster.configmap("cm", {}), "metadata": {"name": "cm", "namespace": "no-such-namespace"}}, field_manager="t")


# -- schema admission of a custom kind --------------------------------------------------------------------


def test_schema_refuses_bad_values_and_unknown_fields(cluster: Cluster) -> None:
    objects = cluster.objects()
    with pytest.raises(ClusterError, match=r'spec\.color: Unsupported value: "blue": supported values: "red", "green"') as bad_enum:
        objects.apply(widget(cluster, "w", {"color": "blue"}), field_manager="operator")
    assert bad_enum.value.status == 422
    with pytest.raises(ClusterError, match=r"spec\.size.*greater than or equal to 0"):
        objects.apply(widget(cluster, "w", {"size": -1}), field_manager="operator")
    with pytest.raises(ClusterError, match=r'unknown field "spec\.colour"'):
        cluster.api.create(widget(cluster, "w", {"colour": "red"}), field_manager="operator")
    with pytest.raises(ClusterError, match=r"\.spec\.colour: field not declared in schema") as typed:
        objects.apply(widget(cluster, "w", {"colour": "red"}), field_manager="operator")
    assert not isinstance(typed.value, retry.Retryable)
    with pytest.raises(ClusterError, match=r"\.spec\.size: expected numeric"):
        objects.apply(widget(cluster, "w", {"size": "big"}), field_manager="operator")
    assert objects.get(WIDGET_API, "Widget", "w", cluster.namespace) is None


def test_schema_defaults_are_filled_in(cluster: Cluster) -> None:
    created = cluster.objects().apply(widget(cluster, "w", {"color": "green"}), field_manager="operator")
    assert created["spec"] == {"color": "green", "size": 1}


def install_cluster_operator_crd(cluster: Cluster) -> None:
    cluster.api.apply(crd.crd(), field_manager="contract-tests", force=True)
    wait_served(cluster.api, CO_API, spec.KIND)


def cluster_operator(body: dict[str, Any], name: str = spec.OBJECT_NAME) -> dict[str, Any]:
    return {"apiVersion": CO_API, "kind": spec.KIND, "metadata": {"name": name}, "spec": body}


def test_the_cluster_operator_crd_fills_every_default(cluster: Cluster) -> None:
    install_cluster_operator_crd(cluster)
    result = cluster.objects().apply(cluster_operator({"driver": {"payload": {"version": "2.31.0"}}}), field_manager="t", dry_run=True)
    expected = spec.ClusterOperatorSpec(driver=spec.Driver(payload=spec.DriverPayload(version="2.31.0")))
    assert result["spec"] == converter.unstructure(expected)
    assert result["spec"]["driver"]["upgradePolicy"]["maxParallel"] == "100%"


def test_the_cluster_operator_crd_refuses_bad_values_with_the_field_and_the_choices(cluster: Cluster) -> None:
    install_cluster_operator_crd(cluster)
    objects = cluster.objects()
    with pytest.raises(ClusterError, match=r'spec\.driver\.deployPolicy: Unsupported value: "Sometimes": supported values: "PreferCloud", "PreferHost", "PreferNewer", "Never"'):
        objects.apply(cluster_operator({"driver": {"deployPolicy": "Sometimes"}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r"spec\.driver\.upgradePolicy\.maxParallel: Invalid value: \"50 percent\".*should match"):
        objects.apply(cluster_operator({"driver": {"upgradePolicy": {"maxParallel": "50 percent"}}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r"maxUnavailable.*should match"):
        objects.apply(cluster_operator({"driver": {"upgradePolicy": {"maxUnavailable": "150%"}}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r"spec\.gpuDevice\.healthyInterval.*greater than or equal to 0"):
        objects.apply(cluster_operator({"gpuDevice": {"healthyInterval": -5}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r'unknown field "spec\.driver\.deployPolicyy"'):
        cluster.api.create(cluster_operator({"driver": {"deployPolicyy": "Never"}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r"\.spec\.driver\.deployPolicyy: field not declared in schema"):
        objects.apply(cluster_operator({"driver": {"deployPolicyy": "Never"}}), field_manager="t", dry_run=True)
    accepted = objects.apply(cluster_operator({"driver": {"upgradePolicy": {"maxParallel": 3}}}), field_manager="t", dry_run=True)
    assert accepted["spec"]["driver"]["upgradePolicy"]["maxParallel"] == 3


# -- selectors ---------------------------------------------------------------------------------------------


def test_label_selectors_equality_and_set_based(cluster: Cluster) -> None:
    objects = cluster.objects()
    for name, labels in [("a", {"tier": "gpu", "zone": "x"}), ("b", {"tier": "cpu", "zone": "y"}), ("c", {"zone": "z"})]:
        objects.apply(cluster.configmap(name, {}, labels={"suite": "sel", **labels}), field_manager="t")

    def names(selector: str) -> list[str]:
        # "suite=sel": controllers add their own objects to every namespace (kube-root-ca.crt).
        listing = objects.list("v1", "ConfigMap", cluster.namespace, f"suite=sel,{selector}")
        return sorted(o["metadata"]["name"] for o in listing.items)

    assert names("tier=gpu") == ["a"]
    assert names("tier==gpu,zone=x") == ["a"]
    assert names("tier!=gpu") == ["b", "c"]
    assert names("zone in (x, z)") == ["a", "c"]
    assert names("zone notin (x)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    with pytest.raises(ClusterError, match="400"):
        names("zone in (x")


def test_field_selectors_by_name_and_node(cluster: Cluster) -> None:
    objects = cluster.objects()
    for name in ("a", "b"):
        objects.apply(cluster.configmap(name, {}, labels={"suite": "sel"}), field_manager="t")

    def names(kind: str, field_selector: str) -> list[str]:
        listing = objects.list("v1", kind, cluster.namespace, "suite=sel", field_selector)
        return sorted(o["metadata"]["name"] for o in listing.items)

    assert names("ConfigMap", "metadata.name=b") == ["b"]
    assert names("ConfigMap", "metadata.name!=b") == ["a"]
    with pytest.raises(ClusterError, match='"spec.nodeName" is not a known field selector'):
        names("ConfigMap", "spec.nodeName=x")
    objects.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": cluster.namespace}}, field_manager="t", force=True)
    for pod, node in (("p1", "no-such-node-a"), ("p2", "no-such-node-b")):
        objects.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": cluster.namespace, "labels": {"suite": "sel"}},
                "spec": {"nodeName": node, "automountServiceAccountToken": False, "containers": [{"name": "c", "image": "busybox"}]},
            },
            field_manager="t",
        )
    assert names("Pod", "spec.nodeName=no-such-node-b") == ["p2"]


# -- node metadata -------------------------------------------------------------------------------------------


def test_node_patches_touch_only_our_keys(cluster: Cluster) -> None:
    node = cluster.add_node(labels={"kubernetes.io/hostname": "h1", "metax-tech.com/gpu.product": "old"}, annotations={"other.io/note": "keep"})
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
    assert {k: v for k, v in labels.items() if k.startswith("metax-tech.com/")} == {"metax-tech.com/gpu.product": "C500"}
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


def event_list(cluster: Cluster, namespace: str | None = None) -> list[dict[str, Any]]:
    """Our events (controllers of the real cluster may report in the same namespace)."""
    listing = cluster.objects().list("events.k8s.io/v1", "Event", namespace or cluster.namespace)
    return [e for e in listing.items if e.get("reportingController") == "metax-tech.com/operator"]


def test_repeated_events_become_one_series(cluster: Cluster) -> None:
    recorder = cluster.events()
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    for _ in range(3):
        recorder.emit(regarding, reason="BadValue", message="vfnum must be 1..16", type=EventType.WARNING)
        cluster.clock.advance(30)
    recorder.emit(regarding, reason="BadValue", message="another problem", type=EventType.WARNING)
    found = sorted(event_list(cluster), key=lambda e: e["note"])
    assert [(e["note"], (e.get("series") or {}).get("count", 1)) for e in found] == [("another problem", 1), ("vfnum must be 1..16", 3)]
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
    recorders = [cluster.events(f"replica-{i}", policy=retry.RetryPolicy(attempts=30, base_delay=0.01, max_delay=0.1)) for i in range(2)]
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
    cluster.events().emit(ObjectRef("v1", "Node", node), reason="NodeNeedReboot", message="firmware upgrade done, need reboot machine to take effect")
    mine = [e for e in event_list(cluster, "default") if e["regarding"]["name"] == node]
    assert [(e["reason"], e["regarding"]["kind"]) for e in mine] == [("NodeNeedReboot", "Node")]
    assert event_list(cluster) == []


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
                assert other == candidate.identity or now >= when + 15, f"{candidate.identity} leads while {other} renewed at {when}"
            last_success = {candidate.identity: now}


def test_a_real_race_for_a_free_lease_has_one_winner(cluster: Cluster) -> None:
    for round_ in range(5):
        candidates = [cluster.lease(f"racer-{round_}-{i}", name=f"race-{round_}") for i in range(3)]
        start = threading.Barrier(len(candidates))
        results: dict[str, bool] = {}

        def run(lock: Any) -> None:
            start.wait()
            results[lock.identity] = lock.try_acquire_or_renew()

        threads = [threading.Thread(target=run, args=(c,)) for c in candidates]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sum(results.values()) == 1, results


# -- watches -------------------------------------------------------------------------------------------------


def test_watch_lists_first_then_streams_changes_in_order(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("before", {"a": "1"}), field_manager="t")
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=30))
    watch.wait_for(named("ADDED", "before"))
    objects.apply(cluster.configmap("after", {}), field_manager="t")
    watch.wait_for(named("ADDED", "after"))
    objects.apply(cluster.configmap("before", {"a": "2"}), field_manager="t")
    modified = watch.wait_for(named("MODIFIED", "before"))
    assert modified.object["data"] == {"a": "2"}
    objects.delete("v1", "ConfigMap", "after", cluster.namespace)
    watch.wait_for(named("DELETED", "after"))
    live = watch.events[watch.events.index(watch.wait_for(named("ADDED", "after"))) :]
    versions = [int(e.object["metadata"]["resourceVersion"]) for e in live if e.type is not WatchEventType.BOOKMARK]
    assert versions == sorted(versions) and len(versions) >= 3


def test_a_selective_watch_sees_objects_move_in_and_out(cluster: Cluster) -> None:
    objects = cluster.objects()
    listing = objects.list("v1", "ConfigMap", cluster.namespace)
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, label_selector="gpu=yes", resource_version=listing.resource_version, timeout_seconds=30))
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "no"}), field_manager="t")
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "yes"}), field_manager="t")
    watch.wait_for(named("ADDED", "cm"))
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "no"}), field_manager="t")
    watch.wait_for(named("DELETED", "cm"))


def test_a_watch_from_an_expired_version_relists_and_goes_on(cluster: Cluster) -> None:
    objects = cluster.objects(policy=retry.RetryPolicy(attempts=30, base_delay=0.2, max_delay=1.0))
    objects.apply(cluster.configmap("old", {}), field_manager="t")
    version = objects.list("v1", "ConfigMap", cluster.namespace).resource_version
    objects.apply(cluster.configmap("between", {}), field_manager="t")
    cluster.compact()
    with pytest.raises(retry.Gone, match=f"too old resource version: {version}"):
        list(cluster.api.watch("v1", "ConfigMap", namespace=cluster.namespace, resource_version=version, timeout_seconds=3))
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, resource_version=version, timeout_seconds=60))
    watch.wait_for(named("ADDED", "old"))
    watch.wait_for(named("ADDED", "between"))
    objects.apply(cluster.configmap("new", {}), field_manager="t")
    watch.wait_for(named("ADDED", "new"))


def test_a_watch_survives_an_api_server_restart(cluster: Cluster) -> None:
    objects = cluster.objects(policy=retry.RetryPolicy(attempts=30, base_delay=0.2, max_delay=1.0))
    objects.apply(cluster.configmap("stays", {}), field_manager="t")
    objects.apply(cluster.configmap("goes", {}), field_manager="t")
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=120))
    watch.wait_for(named("ADDED", "goes"))
    cluster.restart()
    objects.apply(cluster.configmap("born-after-restart", {}), field_manager="t")
    objects.delete("v1", "ConfigMap", "goes", cluster.namespace)
    watch.wait_for(named("ADDED", "born-after-restart"), timeout=60)
    watch.wait_for(named("DELETED", "goes"), timeout=60)
    assert watch.error is None
    assert not [e for e in watch.events if (e.object.get("metadata") or {}).get("name") == "stays" and e.type is WatchEventType.DELETED]


def test_a_quiet_watch_ends_at_its_deadline(cluster: Cluster) -> None:
    objects = cluster.objects()
    started = time.monotonic()
    events = list(objects.watch("v1", "ConfigMap", cluster.namespace, label_selector="nothing=here", timeout_seconds=2))
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 8, elapsed
    assert all(e.type is WatchEventType.BOOKMARK for e in events)


# -- retries -------------------------------------------------------------------------------------------------


def test_429_is_retried_after_the_servers_retry_after(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="t")
    faults.fail_next("get", 429, times=2, retry_after=1)
    got = objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert got is not None and got["data"] == {"a": "1"}
    assert sleep.delays == [1.0, 1.0] and faults.pending_faults() == 0


def test_5xx_and_lost_answers_are_retried_with_backoff(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    faults.fail_next("apply", 503, times=2)
    faults.fail_next("list", 500)
    objects.apply(cluster.configmap("cm", {"a": "1"}, labels={"suite": "retry"}), field_manager="t")
    assert [o["metadata"]["name"] for o in objects.list("v1", "ConfigMap", cluster.namespace, "suite=retry").items] == ["cm"]
    assert len(sleep.delays) == 3 and all(0 < d <= 0.2 for d in sleep.delays)
    faults.fail_next("get", 0)  # no answer at all: the connection is dropped
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace) is not None
    assert len(sleep.delays) == 4 and faults.pending_faults() == 0
    faults.fail_next("list", 0, times=10)
    with pytest.raises(retry.Unavailable):
        cluster.objects(policy=fast_policy(attempts=3), api=api).list("v1", "ConfigMap", cluster.namespace)


def test_retries_give_up_with_the_servers_error(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    objects = cluster.objects(policy=fast_policy(attempts=3), api=api)
    faults.fail_next("get", 503, times=5)
    with pytest.raises(ClusterError, match=r"get ConfigMap .*/cm failed \(503\)"):
        objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert faults.pending_faults() == 2


def test_409_on_a_read_modify_write_is_retried_after_rereading(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    recorder = cluster.events(api=api, policy=fast_policy(sleep=sleep))
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    recorder.emit(regarding, reason="Again", message="m")
    faults.fail_next("patch", 409)
    recorder.emit(regarding, reason="Again", message="m")
    (only,) = event_list(cluster)
    assert only["series"]["count"] == 2 and len(sleep.delays) == 1


def test_an_apply_conflict_is_not_retried(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    faults.fail_next("apply", 409)
    with pytest.raises(Conflict):
        objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="t")
    assert sleep.delays == [] and faults.pending_faults() == 0


def test_an_unloadable_kubeconfig_is_a_cluster_error(tmp_path: Any) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ClusterError, match=f"configure the Kubernetes API client failed: kubeconfig {broken}"):
        client.api_client(broken)
