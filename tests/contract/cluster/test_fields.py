"""The cluster port contract for `Fields`: a list or a watch given a shape hands out only its fields.

Every test runs twice: ``[inmemory]`` and ``[real]`` (marked ``integration``, the test control plane's
kube-apiserver through `client.HttpApi`, which decodes only the shape from the bytes; the in-memory server
prunes what it holds, `metax_k8s.decoding.prune`). Where the two differ, the in-memory server is wrong. Aspects
covered (issue 43 item 7):

- a list with a shape: each item exactly the shape's fields (metadata's name, namespace, resourceVersion and
  labels, the data), across pages, before the transform;
- a watch with a shape: the initial list and every change shaped, and a watch resumed from a shaped event's
  resourceVersion (what the informers do) misses nothing;
- an object that does not fit its shape (a value of another type) arrives whole, in a list and in a watch;
- a watch from an expired version still relists (the ``ERROR`` event's Status is read whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

import pytest

from metax_core.ports.cluster import ObjectFields, ObjectMetaFields, WatchEvent, WatchEventType
from metax_k8s import client, retry
from tests.support.cluster import Cluster, WatchCollector, named


class _LabelledMeta(ObjectMetaFields, total=False):
    labels: dict[str, str] | None


class ConfigMapFields(ObjectFields, total=False):
    metadata: _LabelledMeta
    data: dict[str, str] | None


class CountedFields(TypedDict, total=False):
    """A shape no ConfigMap fits: its data are strings, not integers."""

    metadata: ObjectMetaFields
    data: dict[str, int] | None


def _shaped(
    cluster: Cluster, name: str, version: str, data: dict[str, str], labels: dict[str, str]
) -> dict[str, object]:
    metadata = {"name": name, "namespace": cluster.namespace, "resourceVersion": version, "labels": labels}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def _one_watch(cluster: Cluster, version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
    """One shaped watch request on the adapter itself, from ``version`` (no relist: a 410 is raised)."""
    return cluster.api.watch(
        "v1",
        "ConfigMap",
        namespace=cluster.namespace,
        resource_version=version,
        timeout_seconds=timeout_seconds,
        fields=ConfigMapFields,
    )


def test_a_list_with_a_shape_hands_out_only_its_fields_page_by_page(cluster: Cluster) -> None:
    objects = cluster.objects()
    for i in range(5):
        cm = cluster.configmap(f"cm-{i}", {"k": str(i)}, labels={"n": str(i)})
        cm["metadata"]["annotations"] = {"note": "x" * 100}
        cm["binaryData"] = {"b": "AAAA"}
        objects.apply(cm, field_manager="t")
    seen: list[dict[str, object]] = []

    def transform(item: object) -> object:
        seen.append(item)  # type: ignore[arg-type]
        return item

    # Pages of two on the real server: five objects come in three pages, each decoded with the shape.
    api = client.HttpApi(cluster.api.client, list_chunk=2) if isinstance(cluster.api, client.HttpApi) else cluster.api
    listing = api.list("v1", "ConfigMap", namespace=cluster.namespace, fields=ConfigMapFields, transform=transform)
    mine = [item for item in listing.items if str(item["metadata"]["name"]).startswith("cm-")]
    assert [item["metadata"]["name"] for item in mine] == [f"cm-{i}" for i in range(5)]
    for i, item in enumerate(mine):
        version = str(item["metadata"]["resourceVersion"])
        assert dict(item) == _shaped(cluster, f"cm-{i}", version, {"k": str(i)}, {"n": str(i)})
    assert seen == list(listing.items)  # the transform is given the shaped items


def test_a_watch_with_a_shape_streams_only_its_fields_and_resumes_from_them(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("before", {"a": "1"}, labels={"l": "1"}), field_manager="t")
    watch = WatchCollector(
        objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=30, fields=ConfigMapFields)
    )
    added = watch.wait_for(named("ADDED", "before"))
    assert added.object == _shaped(
        cluster, "before", added.object["metadata"]["resourceVersion"], {"a": "1"}, {"l": "1"}
    )
    objects.apply(cluster.configmap("before", {"a": "2"}, labels={"l": "1"}), field_manager="t")
    modified = watch.wait_for(named("MODIFIED", "before"))
    assert modified.object["data"] == {"a": "2"} and "managedFields" not in modified.object["metadata"]
    version = str(modified.object["metadata"]["resourceVersion"])
    objects.apply(cluster.configmap("after", {"b": "3"}), field_manager="t")
    resumed = WatchCollector(_one_watch(cluster, version, timeout_seconds=10))
    after = resumed.wait_for(named("ADDED", "after"))
    assert set(after.object) == {"apiVersion", "kind", "metadata", "data"} and after.object["data"] == {"b": "3"}
    assert all(
        e.object["metadata"]["name"] != "before" for e in resumed.events if e.type is not WatchEventType.BOOKMARK
    )


def test_an_object_that_does_not_fit_the_shape_arrives_whole(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("words", {"a": "one"}, labels={"l": "1"}), field_manager="t")
    (item,) = [
        i
        for i in cluster.api.list("v1", "ConfigMap", namespace=cluster.namespace, fields=CountedFields).items
        if i["metadata"]["name"] == "words"
    ]
    assert item["data"] == {"a": "one"} and item["metadata"]["labels"] == {"l": "1"} and item["metadata"]["uid"]
    watch = WatchCollector(
        objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=30, fields=CountedFields)
    )
    added = watch.wait_for(named("ADDED", "words"))
    assert added.object["data"] == {"a": "one"} and added.object["metadata"]["uid"]


@pytest.mark.restarts_apiserver
def test_a_shaped_watch_from_an_expired_version_still_relists(cluster: Cluster) -> None:
    objects = cluster.objects(policy=retry.RetryPolicy(attempts=30, base_delay=0.2, max_delay=1.0))
    objects.apply(cluster.configmap("old", {}), field_manager="t")
    version = objects.list("v1", "ConfigMap", cluster.namespace).resource_version
    objects.apply(cluster.configmap("between", {"x": "1"}), field_manager="t")
    cluster.compact()
    with pytest.raises(retry.Gone, match=f"too old resource version: {version}"):
        list(_one_watch(cluster, version, timeout_seconds=3))
    watch = WatchCollector(
        objects.watch(
            "v1", "ConfigMap", cluster.namespace, resource_version=version, timeout_seconds=60, fields=ConfigMapFields
        )
    )
    between = watch.wait_for(named("ADDED", "between"))
    assert set(between.object) == {"apiVersion", "kind", "metadata", "data"} and between.object["data"] == {"x": "1"}
