"""Which GPUs of a node go to vfio-pci (R-VFIO, §3.2.6.1) and the ``metax-tech.com/gpu-vfio`` annotation.

Covered: nodeName regexes match the whole node name (``worknode\\d+`` against ``worknode1x``/``xworknode1``),
the first matching entry wins, the seed's values.yaml example; ``gpus`` parsing ("0,1,2", "all", spaces,
bad input with the field path, duplicates); validation of entries (bad regex, empty name); GPU indexing by
sorted PCI address, VFs when virtualisation is on; the bind/return plan and missing indexes; the
annotation format ``{"0":1,"1":1,"3":0}`` with numeric key order.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.inventory import FunctionKind, PciAddress, PciFunction
from metax_core.node import vfio
from metax_core.spec import vfio_config
from metax_core.spec.model import VfioConfigEntry

# §3.2.6.1 values.yaml example.
SEED_ENTRIES = (
    VfioConfigEntry(node_name="worknode1", gpus="0,1,2"),
    VfioConfigEntry(node_name=r"worknode\d+", gpus="0,1,2"),
)


def pf(bus: int, driver: str | None = "metax") -> PciFunction:
    return PciFunction(address=PciAddress(f"0000:{bus:02x}:00.0"), vendor_id=0x9999, device_id=0x4000, driver=driver)


def vf(bus: int, fn: int, driver: str | None = "metax") -> PciFunction:
    return PciFunction(
        address=PciAddress(f"0000:{bus:02x}:00.{fn}"),
        vendor_id=0x9999,
        device_id=0x4000,
        kind=FunctionKind.VF,
        physfn=PciAddress(f"0000:{bus:02x}:00.0"),
        driver=driver,
    )


# --- node name matching ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "selected"),
    [
        ("worknode1", True),
        ("worknode2", True),
        ("worknode123", True),
        ("worknode1x", False),
        ("xworknode1", False),
        ("worknode", False),
    ],
)
def test_node_name_regex_matches_the_whole_name(node: str, selected: bool) -> None:
    selection = vfio_config.selection_for_node(SEED_ENTRIES, node)
    assert (selection != vfio_config.NOTHING) is selected


def test_the_first_matching_entry_wins() -> None:
    entries = (VfioConfigEntry("worknode1", "0"), VfioConfigEntry(r"worknode\d+", "all"))
    assert vfio_config.selection_for_node(entries, "worknode1") == vfio_config.GpuSelection(indexes=frozenset({0}))
    assert vfio_config.selection_for_node(entries, "worknode2") == vfio_config.GpuSelection(everything=True)


def test_alternation_still_needs_the_whole_name() -> None:
    entries = (VfioConfigEntry("a|b", "all"),)
    assert vfio_config.selection_for_node(entries, "b") == vfio_config.GpuSelection(everything=True)
    assert vfio_config.selection_for_node(entries, "ab") == vfio_config.NOTHING


@settings(max_examples=80, deadline=None)
@given(st.from_regex(r"\A[a-z0-9]{1,10}\Z"), st.from_regex(r"\A[a-z0-9-]{1,3}\Z"))
def test_a_literal_name_never_matches_a_longer_name(name: str, extra: str) -> None:
    entries = (VfioConfigEntry(name, "all"),)
    assert vfio_config.selection_for_node(entries, name) == vfio_config.GpuSelection(everything=True)
    assert vfio_config.selection_for_node(entries, name + extra) == vfio_config.NOTHING
    assert vfio_config.selection_for_node(entries, extra + name) == vfio_config.NOTHING


# --- gpus -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0,1,2", vfio_config.GpuSelection(indexes=frozenset({0, 1, 2}))),
        (" 3 , 0 ", vfio_config.GpuSelection(indexes=frozenset({0, 3}))),
        ("7", vfio_config.GpuSelection(indexes=frozenset({7}))),
        ("all", vfio_config.GpuSelection(everything=True)),
        (" all ", vfio_config.GpuSelection(everything=True)),
    ],
)
def test_parse_gpus(text: str, expected: vfio_config.GpuSelection) -> None:
    assert vfio_config.parse_gpus(text) == expected


@pytest.mark.parametrize("text", ["", " ", "0,,1", "0,", "-1", "one", "0;1", "0 1", "1.0", "all,0", "0x1", "²"])
def test_bad_gpus_are_refused_with_the_field_path(text: str) -> None:
    with pytest.raises(
        InvalidSpec, match=r'^vfioManager.vfioConfig\[2\].gpus: must be "all" or comma-separated GPU indexes'
    ):
        vfio_config.parse_gpus(text, path="vfioManager.vfioConfig[2].gpus")


def test_duplicate_indexes_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="gpus: GPU index listed twice: 1, 2"):
        vfio_config.parse_gpus("1,2,1,2,3")


def test_check_entries_reports_every_problem() -> None:
    entries = (
        VfioConfigEntry("worknode[", "0"),
        VfioConfigEntry("", "x"),
        VfioConfigEntry(r"worknode\d+", "0,1"),
    )
    errors = [str(e) for e in vfio_config.check_entries(entries)]
    assert len(errors) == 3
    assert errors[0].startswith("vfioManager.vfioConfig[0].nodeName: is not a regular expression RE2 accepts")
    assert errors[1] == "vfioManager.vfioConfig[1].nodeName: must not be empty"
    assert errors[2].startswith("vfioManager.vfioConfig[1].gpus: must be")
    assert vfio_config.check_entries(SEED_ENTRIES) == []


# --- indexing and the plan ------------------------------------------------------------------------------


def test_gpus_are_indexed_by_sorted_pci_address() -> None:
    functions = [pf(0x0A), pf(0x09), pf(0x81), pf(0x1B)]
    assert [f.address for f in vfio.indexed_gpus(functions)] == [
        "0000:09:00.0",
        "0000:0a:00.0",
        "0000:1b:00.0",
        "0000:81:00.0",
    ]


def test_vfs_are_indexed_when_virtualisation_is_on() -> None:
    functions = [pf(0x0A), vf(0x0A, 2), pf(0x09), vf(0x09, 1), vf(0x0A, 1)]
    assert [f.address for f in vfio.indexed_gpus(functions)] == ["0000:09:00.1", "0000:0a:00.1", "0000:0a:00.2"]


def test_plan_binds_selected_and_returns_unselected() -> None:
    functions = [pf(1), pf(2, driver="vfio-pci"), pf(3, driver="vfio-pci"), pf(4, driver=None)]
    plan = vfio.plan(functions, vfio_config.parse_gpus("0,1,3,9"))
    assert plan.to_vfio == ("0000:01:00.0", "0000:04:00.0")
    assert plan.to_native == ("0000:03:00.0",)
    assert plan.missing_indexes == (9,)
    assert plan.index_of["0000:04:00.0"] == 3


def test_plan_all_on_a_virtualised_node_binds_every_vf_and_no_pf() -> None:
    functions = [pf(1), vf(1, 1), vf(1, 2, driver="vfio-pci")]
    plan = vfio.plan(functions, vfio_config.GpuSelection(everything=True))
    assert plan.to_vfio == ("0000:01:00.1",)
    assert plan.to_native == ()


def test_nothing_selected_returns_everything_to_native() -> None:
    functions = [pf(1, driver="vfio-pci"), pf(2)]
    assert vfio.plan(functions, vfio_config.NOTHING).to_native == ("0000:01:00.0",)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=8, unique_by=lambda t: t[0]),
    st.frozensets(st.integers(0, 10), max_size=6),
)
def test_plan_property(gpus: list[tuple[int, bool]], indexes: frozenset[int]) -> None:
    functions = [pf(bus, driver="vfio-pci" if bound else "metax") for bus, bound in gpus]
    plan = vfio.plan(functions, vfio_config.GpuSelection(indexes=indexes))
    ordered = sorted(functions, key=lambda f: f.address)
    for i, f in enumerate(ordered):
        want_vfio = i in indexes
        assert (f.address in plan.to_vfio) == (want_vfio and f.driver != "vfio-pci")
        assert (f.address in plan.to_native) == (not want_vfio and f.driver == "vfio-pci")
    assert set(plan.missing_indexes) == {i for i in indexes if i >= len(functions)}


# --- annotation -----------------------------------------------------------------------------------------


def test_annotation_format_from_the_seed() -> None:
    assert vfio.annotation_value({0: True, 1: True, 3: False}) == '{"0":1,"1":1,"3":0}'
    assert vfio.ANNOTATION == "metax-tech.com/gpu-vfio"


def test_annotation_keys_are_in_numeric_order() -> None:
    assert vfio.annotation_value({10: True, 2: False, 1: True}) == '{"1":1,"2":0,"10":1}'
    assert vfio.annotation_value({}) == "{}"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 64), st.booleans()))
def test_annotation_round_trips_through_json(results: dict[int, bool]) -> None:
    decoded = json.loads(vfio.annotation_value(results))
    assert {int(k): bool(v) for k, v in decoded.items()} == results
    assert all(v in (0, 1) for v in decoded.values())
