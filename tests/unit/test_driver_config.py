"""The driver-config ConfigMap (R-VF §3.2.6, R-MODPARAM §3.2.7).

Covered: the two worked examples of the seed, exactly as printed; the lenient forms (mapping values,
missing or extra ``nodes:`` wrapper, first line flush with indented siblings, empty values); strict values
(vfnum non-negative int, supported params only with did-you-mean, gpu_model's allowed form, quoted numbers,
YAML 1.1 surprises, duplicate keys, tabs, bad node names), every error at once with its key path; precedence
(node entry wins whole, even when empty); render → parse round trip; the VF count plan (0 first, refuse
above sriov_totalvfs, all or nothing, vfio-bound PFs left alone); when the module must be reloaded.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.inventory import (
    DriverVersion,
    FunctionKind,
    ModuleState,
    PciAddress,
    PciFunction,
)
from metax_core.node import driver_config as dc
from metax_core.node.driver_config import ModuleAction, ParamSource, PlanOutcome

# The §3.2.7 ConfigMap as the seed prints it (JSON with raw newlines inside the strings), as data values.
SEED_3_2_7 = {
    "module-params": "\n    xcore_page_size: 10\n  ",
    "node-module-params": "\n    sample-node1:\n      xcore_page_size: 12\n  ",
    "node-vfnums": "nodes:\n    sample-node:\n      vfnum: 4\n    sample-node2:\n      vfnum: 2\n  ",
}
# §3.2.6 after the administrator added foo (lines 7-8).
SEED_3_2_6 = {
    "node-vfnums": "nodes:\n    sample-node:\n      vfnum: 4\n    sample-node2:\n      vfnum: 2\n"
    "    foo:\n      vfnum: 2\n  "
}


def errors_of(data: dict[str, object]) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        dc.parse(data)
    return [str(e) for e in info.value.errors]


# --- the seed's worked examples -------------------------------------------------------------------------


def test_3_2_7_worked_example() -> None:
    config = dc.parse(SEED_3_2_7)
    node1 = dc.for_node(config, "sample-node1")
    assert node1.module_params == {"xcore_page_size": "12"}
    assert node1.params_source is ParamSource.NODE
    for other in ("sample-node", "sample-node2", "any-other-node"):
        assert dc.for_node(config, other).module_params == {"xcore_page_size": "10"}
        assert dc.for_node(config, other).params_source is ParamSource.CLUSTER


def test_3_2_6_worked_example() -> None:
    config = dc.parse(SEED_3_2_6)
    assert config.node_vfnums == {"sample-node": 4, "sample-node2": 2, "foo": 2}
    assert dc.for_node(config, "foo").vfnum == 2
    assert dc.for_node(config, "sample-node").vfnum == 4
    assert dc.for_node(config, "not-listed").vfnum == 0


def test_defaults_when_nothing_is_configured() -> None:
    for data in ({}, None, {"node-vfnums": "", "module-params": "  \n", "node-module-params": "~"}):
        node = dc.for_node(dc.parse(data), "n1")
        assert (node.vfnum, dict(node.module_params), node.params_source) == (0, {}, ParamSource.DEFAULT)


# --- lenient about forms --------------------------------------------------------------------------------


def test_values_may_already_be_mappings() -> None:
    config = dc.parse({"node-vfnums": {"nodes": {"a": {"vfnum": 1}}}, "module-params": {"gpu_model": 2}})
    assert config.node_vfnums == {"a": 1}
    assert config.module_params == {"gpu_model": "2"}


def test_node_vfnums_without_the_nodes_wrapper() -> None:
    assert dc.parse({"node-vfnums": "a:\n  vfnum: 3\nb: {vfnum: 0}"}).node_vfnums == {"a": 3, "b": 0}


def test_node_module_params_with_a_nodes_wrapper() -> None:
    config = dc.parse({"node-module-params": "nodes:\n  a:\n    xcore_page_size: 1\n"})
    assert config.node_module_params == {"a": {"xcore_page_size": "1"}}


def test_a_node_called_nodes_needs_the_wrapper() -> None:
    assert dc.parse({"node-vfnums": "nodes:\n  nodes: {vfnum: 1}"}).node_vfnums == {"nodes": 1}
    assert errors_of({"node-vfnums": "nodes: {vfnum: 1}"}) == [
        "node-vfnums.nodes.vfnum: must be a mapping like {vfnum: N}, got number 1 (write 'vfnum: {vfnum: 1}')"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "xcore_page_size: 10\n    gpu_model: C500\n  ",  # content right after the opening quote
        "\n    xcore_page_size: 10\n    gpu_model: C500\n  ",
        "xcore_page_size: 10\ngpu_model: C500",
        "{xcore_page_size: 10, gpu_model: C500}",
    ],
)
def test_seed_style_indentation_is_understood(text: str) -> None:
    assert dc.parse({"module-params": text}).module_params == {"xcore_page_size": "10", "gpu_model": "C500"}


def test_seed_style_indentation_of_per_node_params() -> None:
    text = "sample-node1:\n      xcore_page_size: 12\n    sample-node2:\n      xcore_page_size: 3\n  "
    assert dc.parse({"node-module-params": text}).node_module_params == {
        "sample-node1": {"xcore_page_size": "12"},
        "sample-node2": {"xcore_page_size": "3"},
    }


def test_numeric_node_names_are_names() -> None:
    assert dc.parse({"node-vfnums": "nodes:\n  123: {vfnum: 1}"}).node_vfnums == {"123": 1}


def test_yes_no_on_off_are_not_booleans() -> None:
    assert dc.parse({"node-vfnums": "on: {vfnum: 1}\nno: {vfnum: 2}"}).node_vfnums == {"on": 1, "no": 2}


# --- strict about values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must be between 0 and 65535, got -1"),
        ("65536", "must be between 0 and 65535, got 65536"),
        ("'4'", "must be a non-negative integer, got string '4' (remove the quotes)"),
        ("true", "must be a non-negative integer, got boolean true"),
        ("2.0", "must be a non-negative integer, got number 2.0"),
        ("0x4", "must be a non-negative integer, got string '0x4'"),
        ("null", "must be a non-negative integer, got null"),
    ],
)
def test_vfnum_must_be_a_non_negative_int(value: str, message: str) -> None:
    assert errors_of({"node-vfnums": f"nodes:\n  n1:\n    vfnum: {value}"}) == [
        f"node-vfnums.nodes.n1.vfnum: {message}"
    ]


def test_vfnum_zero_means_no_vfs() -> None:
    assert dc.for_node(dc.parse({"node-vfnums": "nodes: {n1: {vfnum: 0}}"}), "n1").vfnum == 0


def test_unknown_module_param_names_the_key_path() -> None:
    assert errors_of({"node-module-params": "sample-node1:\n  foo: 1"}) == [
        "node-module-params.sample-node1.foo: unknown module parameter; supported: gpu_model, xcore_page_size"
    ]


def test_unknown_module_param_suggests_the_close_one() -> None:
    assert errors_of({"module-params": "xcore_pagesize: 1"}) == [
        "module-params.xcore_pagesize: unknown module parameter; did you mean 'xcore_page_size'? "
        "supported: gpu_model, xcore_page_size"
    ]


@pytest.mark.parametrize("value", ["-1", "'12'", "1.5", "true", "abc", "2147483648"])
def test_xcore_page_size_is_a_non_negative_int(value: str) -> None:
    (error,) = errors_of({"module-params": f"xcore_page_size: {value}"})
    assert error.startswith("module-params.xcore_page_size: must be")


@pytest.mark.parametrize(
    ("value", "expected"), [("0", "0"), ("3", "3"), ("C500", "C500"), ("'7'", "7"), ("c500-v2.1", "c500-v2.1")]
)
def test_gpu_model_accepts_an_int_or_a_word(value: str, expected: str) -> None:
    assert dc.parse({"module-params": f"gpu_model: {value}"}).module_params == {"gpu_model": expected}


@pytest.mark.parametrize(
    "value", ["'a b'", "'x=1'", "-1", "true", "null", "[1]", "''", "'-lead'", "'" + "a" * 65 + "'"]
)
def test_gpu_model_refuses_anything_else(value: str) -> None:
    (error,) = errors_of({"module-params": f"gpu_model: {value}"})
    assert error.startswith("module-params.gpu_model: must be")


def test_every_error_at_once() -> None:
    errors = errors_of(
        {
            "node-vfnum": "",
            "node-vfnums": "nodes:\n  Bad_Name: {vfnum: 1}\n  n1: 4\n  n2: {vfnum: 1, vfs: 2}\n  n3: {}\n",
            "module-params": "xcore_page_size: -3\ngpu_model: 'a b'\n",
            "node-module-params": "n1:\n  foo: 1\n  xcore_page_size: '2'\n",
        }
    )
    assert errors == [
        "node-vfnum: unknown key; did you mean 'node-vfnums'? "
        "supported: node-vfnums, module-params, node-module-params",
        "node-vfnums.nodes.Bad_Name: is not a valid node name (lowercase letters, digits, '-' and '.')",
        "node-vfnums.nodes.n1: must be a mapping like {vfnum: N}, got number 4 (write 'n1: {vfnum: 4}')",
        "node-vfnums.nodes.n2.vfs: unknown field; supported: vfnum",
        "node-vfnums.nodes.n3.vfnum: required field is missing",
        "module-params.xcore_page_size: must be between 0 and 2147483647, got -3",
        "module-params.gpu_model: must be a non-negative integer or a word of letters, digits, '_', '.' and '-' "
        "(at most 64 characters), got string 'a b'",
        "node-module-params.n1.foo: unknown module parameter; supported: gpu_model, xcore_page_size",
        "node-module-params.n1.xcore_page_size: must be a non-negative integer, got string '2' (remove the quotes)",
    ]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a: 1\na: 2", r"key 'a' appears twice \(line 2, column 1\)"),
        ("x:\n\txcore_page_size: 1", "line 2 is indented with a tab"),
        ("xcore_page_size: [1", r"is not valid YAML: .*\(line 1, column"),
        ("- xcore_page_size", "must be a mapping of module parameters, got a list"),
        ("xcore_page_size: !!int 0x10", "'0x10' is not a decimal integer"),
    ],
)
def test_unreadable_yaml_is_reported_with_the_key(text: str, match: str) -> None:
    (error,) = errors_of({"module-params": text})
    assert error.startswith("module-params: ")
    assert re.search(match, error)


def test_node_module_params_must_be_a_mapping() -> None:
    assert errors_of({"node-module-params": "just text"}) == [
        "node-module-params: must be a mapping of node name → parameters, got string 'just text'"
    ]
    assert errors_of({"node-vfnums": "[1, 2]"}) == [
        "node-vfnums: must be a mapping like 'nodes: {<node>: {vfnum: N}}', got a list"
    ]


# --- precedence -----------------------------------------------------------------------------------------


def test_node_entry_wins_whole_no_per_key_merge() -> None:
    config = dc.parse(
        {"module-params": "xcore_page_size: 10\ngpu_model: 1", "node-module-params": "n1: {gpu_model: 2}"}
    )
    assert dc.for_node(config, "n1").module_params == {"gpu_model": "2"}
    assert dc.for_node(config, "n2").module_params == {"xcore_page_size": "10", "gpu_model": "1"}


@pytest.mark.parametrize("entry", ["{}", "null", ""])
def test_an_empty_node_entry_opts_the_node_out_of_cluster_params(entry: str) -> None:
    config = dc.parse({"module-params": "xcore_page_size: 10", "node-module-params": f"n1: {entry}"})
    node = dc.for_node(config, "n1")
    assert (dict(node.module_params), node.params_source) == ({}, ParamSource.NODE)


node_names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z") | st.sampled_from(
    ["08", "1e3", "0x1f", "true", "null", "nodes", "123", "0", "1.5", "on", "no"]
)
params = st.fixed_dictionaries(
    {},
    optional={
        "xcore_page_size": st.integers(0, 2**31 - 1).map(str),
        "gpu_model": st.one_of(st.integers(0, 99).map(str), st.from_regex(r"\A[A-Za-z][A-Za-z0-9_.-]{0,10}\Z")),
    },
)
configs = st.builds(
    dc.DriverConfig,
    node_vfnums=st.dictionaries(node_names, st.integers(0, dc.MAX_VFNUM), max_size=4),
    module_params=params,
    node_module_params=st.dictionaries(node_names, params, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(configs)
@example(dc.DriverConfig(node_module_params={"08": {}}))  # found on a fresh clone: "08" came back as "8"
@example(dc.DriverConfig(node_vfnums={"1e3": 1, "0x1f": 2, "true": 3, "null": 4}))
@example(dc.DriverConfig(node_module_params={"nodes": {"gpu_model": "1"}}))
def test_render_then_parse_round_trips(config: dc.DriverConfig) -> None:
    assert dc.parse(dc.render(config)) == config


@settings(max_examples=60, deadline=None)
@given(configs, node_names)
def test_precedence_property(config: dc.DriverConfig, node: str) -> None:
    result = dc.for_node(config, node)
    if node in config.node_module_params:
        assert result.module_params == config.node_module_params[node]
    else:
        assert result.module_params == config.module_params
    assert result.vfnum == config.node_vfnums.get(node, 0)


# --- VF count plan --------------------------------------------------------------------------------------


def pf(n: int, *, numvfs: int = 0, totalvfs: int = 8, driver: str | None = "metax") -> PciFunction:
    return PciFunction(
        address=PciAddress(f"0000:0{n}:00.0"),
        vendor_id=0x9999,
        device_id=0x4000,
        sriov_totalvfs=totalvfs,
        sriov_numvfs=numvfs,
        driver=driver,
    )


def vf(n: int) -> PciFunction:
    return PciFunction(address=PciAddress(f"0000:0{n}:00.1"), vendor_id=0x9999, device_id=0x4001, kind=FunctionKind.VF)


def test_plan_from_zero_writes_the_count_directly() -> None:
    plan = dc.vf_count_plan([pf(1), pf(2)], 4)
    assert plan.outcome is PlanOutcome.APPLY
    assert [(w.pf, w.target) for w in plan.writes] == [("0000:01:00.0", 4), ("0000:02:00.0", 4)]


def test_plan_from_non_zero_asks_for_the_new_count_only_of_pfs_that_differ() -> None:
    plan = dc.vf_count_plan([pf(1, numvfs=2), pf(2, numvfs=4), vf(1)], 4)
    assert [(w.pf, w.current, w.target) for w in plan.writes] == [("0000:01:00.0", 2, 4)]


def test_plan_back_to_zero() -> None:
    plan = dc.vf_count_plan([pf(1, numvfs=2)], 0)
    assert [w.target for w in plan.writes] == [0]


def test_plan_nothing_to_do() -> None:
    assert dc.vf_count_plan([pf(1, numvfs=4)], 4).outcome is PlanOutcome.NOTHING
    assert dc.vf_count_plan([], 4).outcome is PlanOutcome.NOTHING


def test_plan_refuses_above_totalvfs_and_writes_nothing() -> None:
    plan = dc.vf_count_plan([pf(1, totalvfs=16), pf(2, totalvfs=2)], 4)
    assert plan.outcome is PlanOutcome.REFUSE
    assert plan.writes == ()
    assert plan.problems == ("0000:02:00.0 supports at most 2 VFs, 4 were asked for",)


def test_plan_refuses_vfs_without_sriov_and_hints_at_virt_firmware() -> None:
    plan = dc.vf_count_plan([pf(1, totalvfs=0)], 1)
    assert plan.outcome is PlanOutcome.REFUSE
    assert "fwEnableVirt" in plan.problems[0]
    assert dc.vf_count_plan([pf(1, totalvfs=0)], 0).outcome is PlanOutcome.NOTHING


def test_plan_leaves_vfio_bound_pfs_alone() -> None:
    plan = dc.vf_count_plan([pf(1, driver="vfio-pci", totalvfs=0), pf(2)], 2)
    assert plan.outcome is PlanOutcome.APPLY
    assert plan.skipped == ("0000:01:00.0",)
    assert [w.pf for w in plan.writes] == ["0000:02:00.0"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=5), st.integers(0, 8))
def test_plan_invariants(state: list[tuple[int, int]], desired: int) -> None:
    functions = [pf(i + 1, numvfs=min(n, t), totalvfs=t) for i, (n, t) in enumerate(state)]
    plan = dc.vf_count_plan(functions, desired)
    if any(desired > f.sriov_totalvfs and f.sriov_numvfs != desired for f in functions):
        assert plan.outcome is PlanOutcome.REFUSE and plan.writes == ()
        return
    for write in plan.writes:
        assert write.target == desired
    assert {w.pf for w in plan.writes} == {f.address for f in functions if f.sriov_numvfs != desired}


# --- module params --------------------------------------------------------------------------------------


def loaded(**params: str) -> ModuleState:
    return ModuleState(name="metax", version=DriverVersion("2.18.0"), params=params)


def test_module_not_loaded_is_a_load() -> None:
    assert dc.module_params_decision({"xcore_page_size": "10"}, None).action is ModuleAction.LOAD


def test_same_params_keep_the_module() -> None:
    decision = dc.module_params_decision({"xcore_page_size": "10"}, loaded(xcore_page_size="10\n", gpu_model="0"))
    assert decision.action is ModuleAction.KEEP


def test_different_params_reload_and_name_them() -> None:
    decision = dc.module_params_decision(
        {"xcore_page_size": "12", "gpu_model": "1"}, loaded(xcore_page_size="10", gpu_model="1")
    )
    assert (decision.action, decision.changed) == (ModuleAction.RELOAD, ("xcore_page_size",))


def test_a_dropped_param_reloads_to_get_the_driver_default_back() -> None:
    decision = dc.module_params_decision({}, loaded(xcore_page_size="12"), previously_applied={"xcore_page_size": "12"})
    assert (decision.action, decision.changed) == (ModuleAction.RELOAD, ("xcore_page_size",))
    assert dc.module_params_decision({}, loaded(xcore_page_size="12")).action is ModuleAction.KEEP
