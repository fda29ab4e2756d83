"""The ``metax-vfio-config`` data form (`metax_core.node.vfio_config_map`): rendered by the operator, parsed by
vfio-manager, one owner (issue 20); and IOMMU group conflicts (R-VFIO)."""

from __future__ import annotations

import attrs
import pytest

from metax_core.cluster import configmaps
from metax_core.errors import InvalidSpec
from metax_core.inventory import PciAddress, PciFunction
from metax_core.node import vfio, vfio_config_map
from metax_core.spec import validation, vfio_config
from metax_core.spec.model import VfioConfigEntry
from metax_core.spec.names import REGISTRY_EXAMPLE


def test_render_parse_round_trip_keeps_the_chart_shape() -> None:
    entries = (VfioConfigEntry("worknode1", "0,1,2"), VfioConfigEntry("worknode\\d+", "all"))
    data = vfio_config_map.render(entries)
    assert "nodeName: worknode1" in data["vfioConfig"]
    assert vfio_config_map.parse(data) == entries


def test_wrapper_numbers_and_empty_are_accepted() -> None:
    assert vfio_config_map.parse({"vfioConfig": "vfioConfig:\n- nodeName: a\n  gpus: 3\n"}) == (
        VfioConfigEntry("a", "3"),
    )
    assert vfio_config_map.parse({}) == ()
    assert vfio_config_map.parse({"vfioConfig": ""}) == ()


def test_every_problem_is_named() -> None:
    with pytest.raises(InvalidSpec) as caught:
        vfio_config_map.parse({"vfioConfg": "", "vfioConfig": "- nodeName: '('\n  gpus: one\n- gpus: all\n- x\n"})
    paths = [e.path for e in caught.value.errors]
    assert paths == [
        "vfioConfg",
        "vfioConfig[1].nodeName",
        "vfioConfig[2]",
        "vfioConfig[0].nodeName",
        "vfioConfig[0].gpus",
    ]


def test_not_yaml_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="vfioConfig: is not valid YAML: line 1: "):
        vfio_config_map.parse({"vfioConfig": "- [unclosed"})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- &a {nodeName: n, gpus: all}\n- *a\n", "anchors and aliases"),
        ("- nodeName: n\n  nodeName: m\n  gpus: all\n", "appears twice"),
        ("[" * 100 + "]" * 100, "nested deeper than"),
    ],
)
def test_the_limited_loader_reads_it_like_every_user_input(text: str, problem: str) -> None:
    """The ConfigMap is user input (anyone who can edit it): the project's limits apply (`spec.text`)."""
    with pytest.raises(InvalidSpec, match=problem):
        vfio_config_map.parse({"vfioConfig": text})


def test_what_the_operator_writes_vfio_manager_reads_and_means_the_same() -> None:
    """Writer: the operator's own manifest from a CR's vfioManager.vfioConfig; reader: vfio-manager's parse."""
    cr_spec = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "driver": {"payload": {"version": "2.14.6"}},
            "vfioManager": {"vfioConfig": [{"nodeName": "gpu-[0-9]+", "gpus": "0,2"}, {"nodeName": ".*", "gpus": [1]}]},
        }
    )
    manifest = configmaps.vfio_config_map(cr_spec, "ns")
    assert manifest["metadata"] == {**manifest["metadata"], "name": vfio_config_map.NAME, "namespace": "ns"}
    entries = vfio_config_map.parse(manifest["data"])
    assert entries == cr_spec.vfio_manager.vfio_config
    assert vfio_config.selection_for_node(entries, "gpu-7") == vfio_config.GpuSelection(indexes=frozenset({0, 2}))
    assert vfio_config.selection_for_node(entries, "cpu-1") == vfio_config.GpuSelection(indexes=frozenset({1}))
    without = validation.parse({"registry": REGISTRY_EXAMPLE, "driver": cr_spec_driver()})
    assert vfio_config_map.parse(configmaps.vfio_config_map(without)["data"]) == ()


def cr_spec_driver() -> dict[str, object]:
    return {"payload": {"version": "2.14.6"}}


def gpu(n: int, group: int, driver: str = "metax") -> PciFunction:
    return PciFunction(
        address=PciAddress(f"0000:0{n}:00.0"), vendor_id=0x9999, device_id=0x4000, iommu_group=group, driver=driver
    )


def test_group_conflicts_keep_groups_whole() -> None:
    functions = [gpu(1, 5), gpu(2, 5), gpu(3, 7)]
    conflicts = vfio.group_conflicts(functions, vfio_config.parse_gpus("0,2"))
    assert list(conflicts) == ["0000:01:00.0"]
    assert "shares IOMMU group 5 with GPU(s) 1" in conflicts[PciAddress("0000:01:00.0")]
    assert vfio.group_conflicts(functions, vfio_config.parse_gpus("0,1")) == {}


def test_results_cover_selected_indexes_only() -> None:
    functions = [gpu(1, 1, "vfio-pci"), gpu(2, 2), gpu(3, 3)]
    assert vfio.results(functions, vfio_config.parse_gpus("0,1,9")) == {0: True, 1: False}


def test_plan_gives_back_gpus_an_interrupted_bind_or_return_left_unbound() -> None:
    half_bound = attrs.evolve(gpu(1, 1, "metax"), driver=None, driver_override="vfio-pci")
    half_returned = attrs.evolve(gpu(2, 2, "metax"), driver=None)
    functions = [half_bound, half_returned, gpu(3, 3)]
    nothing = vfio_config.parse_gpus("9")
    assert vfio.plan(functions, nothing, native_loaded=True).to_native == ("0000:01:00.0", "0000:02:00.0")
    # Without the native driver an unbound GPU stays as it is (nothing could take it): no write every round.
    assert vfio.plan(functions, nothing, native_loaded=False).to_native == ("0000:01:00.0",)
