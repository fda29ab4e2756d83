"""The operator's one write counter (`services.operator.writes`): what the quiet-steady-state tests count.

Aspects covered:

- every write verb through the ports is counted once, by verb and kind: apply, status apply, a delete that
  found its object, a finalizer patch, an eviction, a node metadata patch;
- reads, dry runs and deletes of what is already gone are not writes;
- a write the server refused is not counted;
- the parts of the reconciler share one tally (`counted` hands back a counting port as it is).
"""

from __future__ import annotations

import pytest
from harness import NS

from metax_core.errors import Conflict
from metax_k8s import nodes
from metax_k8s.inmemory import InMemoryCluster
from services.operator import writes


def _configmap(data: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": NS}, "data": data}


def test_each_write_is_counted_once_by_verb_and_kind_and_reads_are_not() -> None:
    cluster = InMemoryCluster()
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    name = "gpu-1"
    cluster.add_node(name)
    tally = writes.Tally()
    objects = writes.CountingObjects(cluster.objects, tally)
    node_metadata = writes.CountingNodes(nodes.K8sNodeMetadata(cluster.api, field_manager="op"), tally)

    objects.apply(_configmap({"a": "1"}), field_manager="op", dry_run=True)
    objects.get("v1", "ConfigMap", "cm", NS)
    objects.list("v1", "ConfigMap", NS)
    node_metadata.get_node(name)
    assert tally.total == 0

    live = objects.apply(_configmap({"a": "1"}), field_manager="op")
    objects.set_finalizers(
        "v1",
        "ConfigMap",
        "cm",
        ["example.com/hold"],
        resource_version=live["metadata"]["resourceVersion"],
        field_manager="op",
        namespace=NS,
    )
    with pytest.raises(Conflict):  # refused by the server: no write happened
        objects.set_finalizers(
            "v1",
            "ConfigMap",
            "cm",
            [],
            resource_version=live["metadata"]["resourceVersion"],
            field_manager="op",
            namespace=NS,
        )
    node_metadata.patch_node_metadata(name, labels={"example.com/x": "1"})
    assert objects.delete("v1", "ConfigMap", "absent", NS) is False
    assert (tally.count(writes.APPLY), tally.count(writes.FINALIZERS), tally.count(writes.DELETE)) == (1, 1, 0)
    assert tally.count(writes.NODE_METADATA, "Node") == 1
    assert tally.total == 3


def test_the_reconciler_and_its_parts_count_into_one_tally() -> None:
    cluster = InMemoryCluster()
    objects = writes.CountingObjects(cluster.objects)
    assert writes.counted(objects) is objects
    fresh = writes.counted(cluster.objects)
    assert fresh is not objects and fresh.tally is not objects.tally
    cluster.add_node("gpu-1")
    status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}, "status": {}}
    objects.apply_status(status, field_manager="op", force=True)
    assert (objects.tally.count(writes.STATUS, "Node"), objects.tally.count(writes.STATUS, "ClusterOperator")) == (1, 0)
