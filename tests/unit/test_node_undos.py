"""`metax_core.cluster.node_undos`: which nodes the finalizer asks to undo, and for which agents (R-INSTALL).

The agents with and without an undo are taken from the component table and the uninstall protocol, not
typed here, so a new agent with an undo is covered as soon as it is declared."""

from __future__ import annotations

from typing import Any

from metax_core import components
from metax_core.cluster import node_undos, workloads
from metax_core.node import uninstall


def _pod(component: str, node: str | None) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"labels": {workloads.COMPONENT_LABEL: component}}, "spec": spec}


def _node(name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}}


def _label(component: components.Component) -> str:
    return component.value


def test_each_node_gets_exactly_the_agents_that_run_there_and_have_an_undo() -> None:
    with_undo = [info for info in components.BY_COMPONENT.values() if info.signal in uninstall.AGENTS]
    without = [info for info in components.BY_COMPONENT.values() if info.signal not in uninstall.AGENTS]
    assert with_undo and without
    pods = [_pod(_label(with_undo[0].component), "n1"), _pod(_label(with_undo[1].component), "n1")]
    pods += [_pod(_label(without[0].component), "n2"), _pod(_label(with_undo[0].component), "n3")]
    pods += [_pod(_label(with_undo[0].component), None), _pod("not-a-component", "n4")]
    nodes = [_node("n1", **{"metax-tech.com/x": "1"}), _node("n2"), _node("n3"), _node("n4")]

    found = {u.node: u for u in node_undos.node_undos(nodes, pods)}

    assert set(found) == {"n1", "n3"}
    assert found["n1"].agents == {with_undo[0].signal, with_undo[1].signal}
    assert found["n1"].annotations == {"metax-tech.com/x": "1"}
    assert found["n3"].agents == {with_undo[0].signal}


def test_a_node_missing_from_the_cache_is_not_asked() -> None:
    info = next(i for i in components.BY_COMPONENT.values() if i.signal in uninstall.AGENTS)
    assert node_undos.node_undos([], [_pod(_label(info.component), "gone")]) == []


def test_a_node_that_runs_only_gpu_discovery_has_nothing_to_undo() -> None:
    """Issue 38 item 3: gpu-discovery's pods (gpu-label's component, on every node) answer no request; a CPU
    node runs only those, so the finalizer does not wait for it. The pods' labels are the rendered templates'."""
    from metax_core.spec import validation
    from metax_core.spec.names import REGISTRY_EXAMPLE

    values = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.20.0"}}}
    rendered = workloads.render(validation.parse(values)).objects
    daemonsets = [o for o in rendered if o["kind"] == "DaemonSet"]
    template = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"] for o in daemonsets}

    def pod(workload: str, node: str) -> dict[str, Any]:
        return {"metadata": {"labels": template[workload]}, "spec": {"nodeName": node}}

    pods = [pod("metax-gpu-discovery", "cpu"), pod("metax-gpu-discovery", "gpu"), pod("metax-gpu-label", "gpu")]
    found = node_undos.node_undos([_node("cpu"), _node("gpu")], pods)
    assert [(u.node, u.agents) for u in found] == [("gpu", frozenset({"gpu-label"}))]
