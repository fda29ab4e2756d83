"""The gpu-scheduler extender's decisions and wire format (`metax_core.topology.extender`, C9).

Covers: GPUs requested (containers summed, init containers' max, requests or limits); the filter's free count
(the fewer of the document's free set and allocatable minus bound pods) and its reasons; the ranking from the
published scores (0–10, nodes without topology 0); ExtenderArgs with NodeNames or Nodes; the documented
KubeSchedulerConfiguration entry (ignorable, nodeCacheCapable, no bind verb, managed resource).
"""

from __future__ import annotations

import json

import pytest

from metax_core.errors import InvalidSpec
from metax_core.inventory import PciAddress
from metax_core.topology import document, extender, placement

GPU = "metax-tech.com/gpu"


def pod(*limits: int, init: int = 0, requests: bool = False) -> dict[str, object]:
    key = "requests" if requests else "limits"
    return {
        "spec": {
            "containers": [{"name": f"c{i}", "resources": {key: {GPU: str(n)}}} for i, n in enumerate(limits)],
            "initContainers": [{"name": "i", "resources": {"limits": {GPU: str(init)}}}] if init else [],
        }
    }


def test_gpus_requested() -> None:
    assert extender.gpus_requested(pod(2, 1)) == 3
    assert extender.gpus_requested(pod(1, init=4)) == 4
    assert extender.gpus_requested(pod(2, requests=True)) == 2
    assert extender.gpus_requested({"spec": {"containers": [{"name": "c"}]}}) == 0


def node(free: int, *, allocatable: int = 8, mx: bool = False) -> dict[str, object]:
    gpus = tuple(
        document.Gpu(PciAddress(f"0000:{0x10 + i:02x}:00.0"), 0, (PciAddress("0000:00:01.0"),)) for i in range(8)
    )
    if mx:
        gpus = tuple(
            document.Gpu(g.address, g.numa_node, g.pcie_path, tuple(o.address for o in gpus if o != g)) for g in gpus
        )
    doc = document.NodeTopology(gpus=gpus, free=tuple(g.address for g in gpus[:free]))
    ann = (
        {document.TOPOLOGY: document.encode(doc), **placement.hami_annotations(doc)}
        if free
        else {document.TOPOLOGY: document.encode(doc)}
    )
    return {"metadata": {"annotations": ann}, "status": {"allocatable": {GPU: str(allocatable)}}}


def test_filter_counts_the_fewer_of_published_and_allocatable_minus_bound() -> None:
    facts = {
        "published-3": extender.NodeFacts.of(node(3)),
        "bound-5": extender.NodeFacts.of(node(8)),
        "plain": extender.NodeFacts.of({"status": {"allocatable": {GPU: "4"}}}),
        "fine": extender.NodeFacts.of(node(8)),
    }
    verdict = extender.filter_nodes(4, ["published-3", "bound-5", "plain", "fine", "unknown"], facts, {"bound-5": 5})
    assert verdict.passed == ("plain", "fine")
    assert verdict.failed == {
        "published-3": f"3 free {GPU}, 4 requested",
        "bound-5": f"3 free {GPU}, 4 requested",
        "unknown": "node not in the gpu-scheduler's cache yet",
    }
    assert extender.filter_nodes(0, ["unknown"], {}, {}).passed == ("unknown",)


def test_priority_is_the_published_score_in_tenths() -> None:
    facts = {
        "mx": extender.NodeFacts.of(node(8, mx=True)),
        "pcie": extender.NodeFacts.of(node(8)),
        "plain": extender.NodeFacts.of({}),
    }
    ranked = dict(extender.prioritize(4, ["mx", "pcie", "plain"], facts))
    assert ranked == {"mx": 10, "pcie": 6, "plain": 0}  # MetaXLink 100, one root port (PXB) 60


def test_a_bad_annotation_ranks_as_no_topology_and_says_why() -> None:
    facts = extender.NodeFacts.of(
        {"metadata": {"annotations": {document.TOPOLOGY: "{"}}, "status": {"allocatable": {GPU: "8"}}}
    )
    assert facts.topology is None and "not JSON" in facts.problem and facts.free(0) == 8


def test_args_with_node_names_or_nodes_and_bad_ones() -> None:
    args = extender.parse_args(json.dumps({"Pod": pod(1), "NodeNames": ["a", "b"]}).encode())
    assert args.node_names == ("a", "b")
    args = extender.parse_args(json.dumps({"Pod": pod(1), "Nodes": {"items": [{"metadata": {"name": "c"}}]}}).encode())
    assert args.node_names == ("c",)
    with pytest.raises(InvalidSpec, match=r"ExtenderArgs\.Pod: must be a Pod object"):
        extender.parse_args(b'{"NodeNames": []}')
    verdict = extender.Verdict(("a",), {"b": "why"})
    assert extender.parse_filter(extender.render_filter(verdict)) == verdict
    assert extender.parse_priorities(extender.render_priorities([("a", 3)])) == [("a", 3)]


def test_the_documented_scheduler_configuration_entry() -> None:
    entry = extender.scheduler_extender("http://metax-gpu-scheduler.metax-operator.svc:8088")
    assert entry["ignorable"] is True and entry["nodeCacheCapable"] is True
    assert "bindVerb" not in entry and entry["filterVerb"] == "filter" and entry["prioritizeVerb"] == "prioritize"
    assert entry["managedResources"] == [{"name": GPU, "ignoredByScheduler": False}]
