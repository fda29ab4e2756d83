"""The cluster port contract for watches.

Every test runs twice: ``[inmemory]`` on every test run, ``[real]`` (marked ``integration``) against the
test control plane's kube-apiserver through `client.HttpApi` (the ``cluster`` fixture in conftest.py). Where
the two differ, the in-memory server is wrong. Aspects covered:

- watches: initial list, live changes, selector moves, 410 relist, API server restart, client deadline.
"""

from __future__ import annotations

import time

import pytest

from metax_core.ports.cluster import WatchEventType
from metax_k8s import retry
from tests.support.cluster import Cluster, WatchCollector, named

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
    watch = WatchCollector(
        objects.watch(
            "v1",
            "ConfigMap",
            cluster.namespace,
            label_selector="gpu=yes",
            resource_version=listing.resource_version,
            timeout_seconds=30,
        )
    )
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "no"}), field_manager="t")
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "yes"}), field_manager="t")
    watch.wait_for(named("ADDED", "cm"))
    objects.apply(cluster.configmap("cm", {}, labels={"gpu": "no"}), field_manager="t")
    watch.wait_for(named("DELETED", "cm"))


@pytest.mark.restarts_apiserver
def test_a_watch_from_an_expired_version_relists_and_goes_on(cluster: Cluster) -> None:
    objects = cluster.objects(policy=retry.RetryPolicy(attempts=30, base_delay=0.2, max_delay=1.0))
    objects.apply(cluster.configmap("old", {}), field_manager="t")
    version = objects.list("v1", "ConfigMap", cluster.namespace).resource_version
    objects.apply(cluster.configmap("between", {}), field_manager="t")
    cluster.compact()
    with pytest.raises(retry.Gone, match=f"too old resource version: {version}"):
        list(
            cluster.api.watch(
                "v1", "ConfigMap", namespace=cluster.namespace, resource_version=version, timeout_seconds=3
            )
        )
    watch = WatchCollector(
        objects.watch("v1", "ConfigMap", cluster.namespace, resource_version=version, timeout_seconds=60)
    )
    watch.wait_for(named("ADDED", "old"))
    watch.wait_for(named("ADDED", "between"))
    objects.apply(cluster.configmap("new", {}), field_manager="t")
    watch.wait_for(named("ADDED", "new"))


@pytest.mark.restarts_apiserver
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
    assert not [
        e
        for e in watch.events
        if (e.object.get("metadata") or {}).get("name") == "stays" and e.type is WatchEventType.DELETED
    ]


def test_a_quiet_watch_ends_at_its_deadline(cluster: Cluster) -> None:
    objects = cluster.objects()
    started = time.monotonic()
    events = list(objects.watch("v1", "ConfigMap", cluster.namespace, label_selector="nothing=here", timeout_seconds=2))
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 8, elapsed
    assert all(e.type is WatchEventType.BOOKMARK for e in events)
