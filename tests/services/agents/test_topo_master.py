"""topo-master on the in-memory cluster (C7): the cluster view, one ConfigMap, and inconsistencies as Events.

Covers: the view lists every node with a topology document (GPUs, free GPUs, scores as published) and not
the others; a quiet cluster makes no write; an unreadable document and a document disagreeing with the
node's GPU count are each one Warning Event on that Node (not one per round); the view reads back through
its owner.
"""

from __future__ import annotations

from metax_core.cluster import workloads
from metax_core.inventory import PciAddress
from metax_core.node import labels
from metax_core.spec import validation
from metax_core.topology import cluster_view, document, placement
from metax_core.wire import event_reasons
from metax_k8s.inmemory import cluster as inmemory
from services.topo_master import master
from services.topo_worker import agent as topo_agent

NAMESPACE = "metax-operator"


def doc(n: int) -> document.NodeTopology:
    gpus = tuple(
        document.Gpu(PciAddress(f"0000:{0x10 + i:02x}:00.0"), 0, (PciAddress("0000:00:01.0"),)) for i in range(n)
    )
    return document.NodeTopology(gpus=gpus, free=tuple(g.address for g in gpus))


def test_view_events_and_quiet_rounds() -> None:
    k8s = inmemory.InMemoryCluster()
    for namespace in (NAMESPACE, "default"):
        k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, field_manager="t")
    k8s.add_node("a", labels={labels.GPU_COUNT: "4"})
    k8s.add_node("b", labels={labels.GPU_COUNT: "8"})
    k8s.add_node("plain")
    k8s.add_node("broken")
    k8s.node_metadata.patch_node_metadata("a", annotations=topo_agent.published(doc(4)))
    k8s.node_metadata.patch_node_metadata("b", annotations=topo_agent.published(doc(2)))  # label says 8
    k8s.node_metadata.patch_node_metadata("broken", annotations={document.TOPOLOGY: "{"})
    for obj in workloads.render(
        validation.parse({"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.14.6"}}})
    ).objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == cluster_view.NAME:
            k8s.objects.apply(obj, field_manager="metax-operator")  # the operator creates it
    events = k8s.events(reporting_controller="metax-tech.com/topo-master", reporting_instance="t")
    m = master.TopoMaster(k8s.objects, events, NAMESPACE)

    m.round()
    cm = k8s.objects.get("v1", "ConfigMap", cluster_view.NAME, NAMESPACE)
    assert cm is not None
    view = cluster_view.decode(cm["data"][cluster_view.KEY])
    assert sorted(view) == ["a", "b"]
    assert view["a"] == cluster_view.NodeEntry(4, 4, {k: c.score for k, c in placement.best_sets(doc(4)).items()})
    reasons = sorted(
        (e["regarding"]["name"], e["reason"]) for e in k8s.objects.list("events.k8s.io/v1", "Event", "default").items
    )
    assert reasons == [("b", event_reasons.TOPOLOGY_INCONSISTENT), ("broken", event_reasons.TOPOLOGY_UNREADABLE)]

    m.round()
    assert m.writes == 1  # nothing changed: no write
    assert len(k8s.objects.list("events.k8s.io/v1", "Event", "default").items) == 2  # reported once

    k8s.node_metadata.patch_node_metadata("plain", annotations=topo_agent.published(doc(1)))
    m.round()
    assert k8s.objects.get("v1", "ConfigMap", cluster_view.NAME, NAMESPACE)["metadata"]["labels"]  # type: ignore[index]
    assert m.writes == 2 and "plain" in cluster_view.decode(
        k8s.objects.get("v1", "ConfigMap", cluster_view.NAME, NAMESPACE)["data"][cluster_view.KEY]  # type: ignore[index]
    )
