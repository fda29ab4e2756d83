"""What an edit of driver-config would do, predicted before it is applied (R-DIFF, R-VF, R-MODPARAM;
`metax_core.cluster.diff_driver_config`).

Aspects: the same ConfigMap changes nothing; a VF count changed on one node recreates that node's gpu-device pod
only (old → new from the count recorded in status.vfNums, as the operator decides, `vf_restarts.decide`) and
driver-manager sets the VFs there (through 0 from a non-zero count, to 0 removes them); a cluster-wide module
parameter reloads the driver on every node without its own entry (the node entry wins whole, as
`driver_config.for_node` resolves it) and recreates no pod; deployPolicy Never leaves the kernel alone; a node
without driver-manager, or gpuDevice not deployed, gets nothing done; a node named in the ConfigMap that the
cluster lacks is reported; a bad ConfigMap is refused with every error under ``data.<key>``.
"""

from __future__ import annotations

from typing import Any

from metax_core.cluster import diff, vf_restarts
from metax_core.cluster import diff_driver_config as dc
from metax_core.errors import InvalidSpec
from metax_core.spec import validation

BASE: dict[str, Any] = {"registry": "r.example.com", "driver": {"payload": {"version": "2.20.0"}}}
NODES = ("gpu-a", "gpu-b", "cpu-a")
PODS = (vf_restarts.GpuDevicePod("gd-a", "gpu-a"), vf_restarts.GpuDevicePod("gd-b", "gpu-b"))


def cm(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "driver-config", "namespace": "metax-operator"},
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


LIVE = cm(node_vfnums="nodes:\n  gpu-b:\n    vfnum: 2\n", module_params="", node_module_params="")


def cluster(spec: dict[str, Any] | None = None, **kwargs: Any) -> dc.Cluster:
    facts: dict[str, Any] = {
        "nodes": NODES,
        "recorded": {"gpu-a": 0, "gpu-b": 2},
        "gpu_device_pods": PODS,
        "driver_nodes": ("gpu-a", "gpu-b"),
        "spec": validation.parse(spec if spec is not None else BASE),
    }
    return dc.Cluster(**{**facts, **kwargs})


def test_the_same_config_map_changes_nothing() -> None:
    p = dc.predict(LIVE, LIVE, cluster())
    assert (p.refused, p.objects, p.restarts, p.nodes, p.changes) == ((), (), (), (), False)


def test_a_vf_count_recreates_that_nodes_gpu_device_pod_only() -> None:
    new = cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: 4\n  gpu-b:\n    vfnum: 2\n")
    p = dc.predict(LIVE, new, cluster())
    assert [(r.workload, r.action, r.nodes) for r in p.restarts] == [
        ("metax-gpu-device", diff.Action.UPDATE, ("gpu-a",))
    ]
    assert "VF count 0 → 4" in p.restarts[0].why and "gd-a" in p.restarts[0].why
    assert [(n.node, n.vfs, n.params) for n in p.nodes] == [("gpu-a", (0, 4), None)]
    assert "sets 4 VF(s) per GPU" in p.nodes[0].driver_manager and "through 0" not in p.nodes[0].driver_manager
    [change] = p.objects
    assert (change.kind, change.name, change.action) == ("ConfigMap", "driver-config", diff.Action.UPDATE)
    assert "+      gpu-a:\n+        vfnum: 4\n" in change.diff, change.diff  # the changed lines of the value
    assert p.changes


def test_a_count_between_two_non_zero_values_goes_through_zero_and_to_zero_removes_the_vfs() -> None:
    new = cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: 4\n")
    p = dc.predict(cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: 2\n  gpu-b:\n    vfnum: 2\n"), new, cluster())
    by_node = {n.node: n for n in p.nodes}
    assert by_node["gpu-a"].vfs == (2, 4) and "through 0" in by_node["gpu-a"].driver_manager
    assert by_node["gpu-b"].vfs == (2, 0) and "removes the VFs" in by_node["gpu-b"].driver_manager
    # the operator recreates from what it recorded: gpu-a's pod started with 0, gpu-b's with 2
    assert sorted((r.nodes, r.why.split(" (")[0]) for r in p.restarts) == [
        (("gpu-a",), "VF count 0 → 4"),
        (("gpu-b",), "VF count 2 → 0"),
    ]


def test_cluster_module_params_reload_every_node_without_its_own_entry() -> None:
    new = cm(
        node_vfnums="nodes:\n  gpu-b:\n    vfnum: 2\n",
        module_params="xcore_page_size: 10\n",
        node_module_params="gpu-b: {}\n",
    )
    p = dc.predict(LIVE, new, cluster())
    assert p.restarts == ()  # parameters recreate no pod
    by_node = {n.node: n for n in p.nodes}
    assert set(by_node) == {"gpu-a", "cpu-a"}  # gpu-b's own (empty) entry wins whole
    assert by_node["gpu-a"].params == ({}, {"xcore_page_size": "10"}) and by_node["gpu-a"].vfs is None
    assert "reloads metax with xcore_page_size=10" in by_node["gpu-a"].driver_manager
    assert "changed: xcore_page_size" in by_node["gpu-a"].driver_manager
    assert "no driver-manager runs on this node" in by_node["cpu-a"].driver_manager


def test_a_parameter_removed_reloads_with_the_drivers_defaults() -> None:
    live = cm(module_params="gpu_model: 2\n")
    p = dc.predict(live, cm(module_params=""), cluster(recorded={}))
    assert {n.node: n.params for n in p.nodes}["gpu-a"] == ({"gpu_model": "2"}, {})
    assert "reloads metax with the driver's defaults" in {n.node: n for n in p.nodes}["gpu-a"].driver_manager


def test_deploy_policy_never_leaves_the_kernel_alone() -> None:
    never = {**BASE, "driver": {"deployPolicy": "Never"}}
    p = dc.predict(LIVE, cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: 4\n"), cluster(never))
    gpu_a = {n.node: n for n in p.nodes}["gpu-a"]
    assert "deployPolicy Never" in gpu_a.driver_manager and "not applied" in gpu_a.driver_manager
    assert [r.nodes for r in p.restarts] == [("gpu-a",), ("gpu-b",)]  # the operator still recreates the pods


def test_without_gpu_device_or_the_driver_nothing_is_recreated_or_applied() -> None:
    new = cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: 4\n  gpu-b:\n    vfnum: 2\n")
    p = dc.predict(LIVE, new, cluster({**BASE, "gpuDevice": {"deploy": False}}))
    assert p.restarts == () and [n.node for n in p.nodes] == ["gpu-a"]
    p = dc.predict(LIVE, new, dc.Cluster(nodes=NODES, recorded={"gpu-a": 0}, gpu_device_pods=PODS))  # no spec
    assert p.restarts == ()
    assert p.nodes[0].driver_manager == "no driver-manager is deployed: nothing is applied"


def test_a_node_the_cluster_lacks_is_reported() -> None:
    new = cm(node_vfnums="nodes:\n  gpu-b:\n    vfnum: 2\n  gpu-z:\n    vfnum: 4\n")
    p = dc.predict(LIVE, new, cluster())
    assert p.unknown_nodes == ("gpu-z",) and p.nodes == () and p.restarts == ()


def test_a_bad_config_map_is_refused_naming_each_field() -> None:
    new = cm(node_vfnums="nodes:\n  gpu-a:\n    vfnum: '4'\n", module_params="xcore_page_sise: 10\n")
    new["data"]["node-vfnum"] = ""
    p = dc.predict(LIVE, new, cluster())
    refused = {e.path: e.message for e in p.refused}
    assert set(refused) == {
        "data.node-vfnum",
        "data.node-vfnums.nodes.gpu-a.vfnum",
        "data.module-params.xcore_page_sise",
    }
    assert "remove the quotes" in refused["data.node-vfnums.nodes.gpu-a.vfnum"]
    assert "did you mean 'xcore_page_size'" in refused["data.module-params.xcore_page_sise"]
    assert (p.objects, p.restarts, p.nodes) == ((), (), ())


def test_a_value_that_is_no_text_is_refused() -> None:
    errors = validation_errors({"node-vfnums": {"nodes": {"gpu-a": {"vfnum": 4}}}})
    assert [e.path for e in errors] == ["data.node-vfnums"] and "must be text" in errors[0].message


def validation_errors(data: dict[str, Any]) -> list[Any]:
    try:
        dc.parse(data)
    except InvalidSpec as exc:
        return list(exc.errors)
    raise AssertionError("accepted")
