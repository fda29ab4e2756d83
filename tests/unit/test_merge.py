"""Pod template precedence and merge (R-MERGE): the §3.2.5 worked examples, precedence rules, merge laws."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from metax_core.cluster import merge
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE


def _tol(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


# §3.2.5.2: the component default templates of the example (Helm values of maca and driver).
MACA_DEFAULT = {"tolerations": [_tol("node-role", "maca", "NoSchedule")]}
DRIVER_DEFAULT = {"tolerations": [_tol("node-role", "driver", "NoExecute")]}

SEED_VALUES = {
    "registry": REGISTRY_EXAMPLE,
    "podTemplateSpec": {"spec": {"tolerations": [_tol("node-type", "general", "NoSchedule")]}},
    "maca": {"podTemplateSpec": {"spec": {"tolerations": [_tol("node-type", "gpu", "NoSchedule")]}}},
    "driver": {"payload": {"version": "1.0.0"}},
}


def test_seed_example_maca_gets_its_default_and_its_own_toleration_not_the_global_one() -> None:
    s = validation.parse(SEED_VALUES)
    pod = merge.pod_spec_for(s, s.maca.pod_template_spec, MACA_DEFAULT)
    assert pod["tolerations"] == [_tol("node-role", "maca", "NoSchedule"), _tol("node-type", "gpu", "NoSchedule")]


def test_seed_example_driver_inherits_the_global_toleration() -> None:
    s = validation.parse(SEED_VALUES)
    pod = merge.pod_spec_for(s, s.driver.pod_template_spec, DRIVER_DEFAULT)
    assert pod["tolerations"] == [_tol("node-role", "driver", "NoExecute"), _tol("node-type", "general", "NoSchedule")]


def test_deprecated_global_tolerations_apply_when_no_template_sets_tolerations() -> None:
    s = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "tolerations": [_tol("key1", "value1", "NoSchedule")],
            "driver": {"deployPolicy": "Never"},
        }
    )
    pod = merge.pod_spec_for(s, s.maca.pod_template_spec, MACA_DEFAULT)
    assert pod["tolerations"][-1] == _tol("key1", "value1", "NoSchedule")


def test_template_tolerations_win_over_deprecated_global_tolerations() -> None:
    s = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "tolerations": [_tol("key1", "value1", "NoSchedule")],
            "podTemplateSpec": {"spec": {"tolerations": [_tol("node-type", "general", "NoSchedule")]}},
            "driver": {"deployPolicy": "Never"},
        }
    )
    pod = merge.pod_spec_for(s, s.maca.pod_template_spec, {})
    assert pod["tolerations"] == [_tol("node-type", "general", "NoSchedule")]


def test_deprecated_tolerations_still_apply_when_template_sets_only_a_node_selector() -> None:
    s = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "tolerations": [_tol("key1", "value1", "NoSchedule")],
            "maca": {"podTemplateSpec": {"spec": {"nodeSelector": {"pool": "gpu"}}}},
            "driver": {"deployPolicy": "Never"},
        }
    )
    pod = merge.pod_spec_for(s, s.maca.pod_template_spec, {"nodeSelector": {"metax-tech.com/gpu.installed": "true"}})
    assert pod["nodeSelector"] == {"metax-tech.com/gpu.installed": "true", "pool": "gpu"}
    assert pod["tolerations"] == [_tol("key1", "value1", "NoSchedule")]


def test_component_template_replaces_the_global_one_entirely() -> None:
    s = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "podTemplateSpec": {"spec": {"nodeSelector": {"zone": "a"}, "tolerations": [_tol("a", "b", "NoSchedule")]}},
            "maca": {"podTemplateSpec": {"spec": {"affinity": {"nodeAffinity": {}}}}},
            "driver": {"deployPolicy": "Never"},
        }
    )
    pod = merge.pod_spec_for(s, s.maca.pod_template_spec, {})
    assert pod == {"affinity": {"nodeAffinity": {}}}


def test_maps_merge_with_the_override_winning_on_the_same_key() -> None:
    merged = merge.merge_values({"a": "1", "b": {"c": 1, "d": [1]}}, {"a": "2", "b": {"d": [2], "e": 3}})
    assert merged == {"a": "2", "b": {"c": 1, "d": [1, 2], "e": 3}}


def test_fields_outside_the_managed_three_are_left_alone() -> None:
    s = validation.parse({"registry": REGISTRY_EXAMPLE, "driver": {"deployPolicy": "Never"}})
    pod = merge.pod_spec_for(s, None, {"hostPID": True, "tolerations": []})
    assert pod == {"hostPID": True, "tolerations": []}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=10,
)


@given(json_values, json_values)
def test_merge_is_idempotent(base: Any, extra: Any) -> None:
    once = merge.merge_values(base, extra)
    assert merge.merge_values(once, extra) == once


@given(
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
)
def test_merge_keeps_every_key_and_never_changes_its_inputs(base: dict[str, Any], extra: dict[str, Any]) -> None:
    before = (repr(base), repr(extra))
    merged = merge.merge_values(base, extra)
    assert set(merged) == set(base) | set(extra)
    assert (repr(base), repr(extra)) == before
