"""Which allocator serves a node (R-DRA, `metax_core.node.allocation`): the decision, and the node requirement
that makes the scheduler agree with it for every label value, absent and invalid ones included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.node import allocation
from metax_core.node.allocation import Allocator
from metax_core.spec import model as spec
from tests.support.placement import expression_matches

LABEL_VALUES: tuple[str | None, ...] = (None, "device-plugin", "dra", "DRA", "", "gpu-device", "deviceplugin")
"""Absent, the two valid values, and invalid ones (case, empty, near misses)."""


def _labels(value: str | None) -> dict[str, str]:
    return {} if value is None else {allocation.LABEL: value}


@pytest.mark.parametrize("setting", list(spec.Allocation))
@pytest.mark.parametrize("value", LABEL_VALUES)
def test_an_absent_or_invalid_label_means_the_default_and_only_an_invalid_one_is_a_problem(
    setting: spec.Allocation, value: str | None
) -> None:
    decision = allocation.decide(setting, _labels(value))
    if value in allocation.VALUES:
        assert decision == allocation.Decision(Allocator(value))
    else:
        assert decision.allocator is allocation.default(setting)
        assert (decision.problem is None) == (value is None)
    if decision.problem is not None:
        assert allocation.LABEL in decision.problem and repr(value) in decision.problem
        assert "device-plugin, dra" in decision.problem


def test_the_setting_and_the_label_spell_the_two_allocators_their_own_way() -> None:
    assert allocation.LABEL == "metax-tech.com/gpu.allocation"
    assert allocation.VALUES == ("device-plugin", "dra")
    assert allocation.default(spec.Allocation.DEVICE_PLUGIN) is Allocator.DEVICE_PLUGIN
    assert allocation.default(spec.Allocation.DRA) is Allocator.DRA
    assert spec.DraDriver().default_allocation is spec.Allocation.DEVICE_PLUGIN


@pytest.mark.parametrize(
    ("setting", "device_plugin", "dra"),
    [
        (spec.Allocation.DEVICE_PLUGIN, ("NotIn", "dra"), ("In", "dra")),
        (spec.Allocation.DRA, ("In", "device-plugin"), ("NotIn", "device-plugin")),
    ],
)
def test_the_requirements_name_only_the_value_that_is_not_the_default(
    setting: spec.Allocation, device_plugin: tuple[str, str], dra: tuple[str, str]
) -> None:
    for allocator, (operator, value) in ((Allocator.DEVICE_PLUGIN, device_plugin), (Allocator.DRA, dra)):
        assert allocation.requirement(setting, allocator) == {
            "key": allocation.LABEL,
            "operator": operator,
            "values": [value],
        }


@given(
    setting=st.sampled_from(list(spec.Allocation)),
    value=st.one_of(st.none(), st.sampled_from(LABEL_VALUES[1:]), st.text(max_size=8)),
    others=st.dictionaries(st.sampled_from(["a", "metax-tech.com/gpu.installed"]), st.text(max_size=3)),
)
def test_exactly_the_decided_allocator_matches_its_requirement(
    setting: spec.Allocation, value: str | None, others: dict[str, str]
) -> None:
    labels = {**others, **_labels(value)}
    decided = allocation.decide(setting, labels).allocator
    matching = {a for a in Allocator if expression_matches(allocation.requirement(setting, a), labels)}
    assert matching == {decided}


def test_require_adds_the_expression_to_every_term_of_the_administrators_affinity() -> None:
    expression = allocation.requirement(spec.Allocation.DEVICE_PLUGIN, Allocator.DRA)
    admin = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
            },
            "podAntiAffinity": {"x": 1},
        },
        "nodeSelector": {"k": "v"},
    }
    placed = allocation.require(admin, expression)
    node = placed["affinity"]["nodeAffinity"]
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, expression]},
        {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
            "matchExpressions": [expression],
        },
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1, "preference": {}}]
    assert placed["affinity"]["podAntiAffinity"] == {"x": 1} and placed["nodeSelector"] == {"k": "v"}
    # the input is left as it was (the render builds on the merged template, never edits the spec's)
    assert (
        len(
            admin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
                "matchExpressions"
            ]
        )
        == 1
    )  # type: ignore[index]


def test_require_without_any_term_makes_the_expression_the_one_term() -> None:
    expression = allocation.requirement(spec.Allocation.DRA, Allocator.DEVICE_PLUGIN)
    assert allocation.require({"tolerations": []}, expression) == {
        "tolerations": [],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expression]}]
                }
            }
        },
    }
