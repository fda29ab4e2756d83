"""Chart values as Helm users write them (issue 20, R-VALUES): `metax_core.spec.chart_values`.

Covered: in chart values, a string that Helm's ``--set`` would have read as a boolean or an integer means
that value, at every boolean and integer field (and the integer form of the int-or-percent fields), down
lists; the strings Helm itself keeps as strings (leading zeros, signs, spaces, exponents, other spellings)
are refused with the field's path; the ClusterOperator object stays strict (its CRD types these fields);
``gpus`` takes one index as an integer everywhere; the list of fields is exactly the spec's boolean and
integer fields, and the generated values schema and chart template cover each of them. The real helm
(``--set`` against ``--set-string``) is tests/integration/chart/test_helm_install.py.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from metax_core.errors import InvalidSpec
from metax_core.spec import chart_values, quantity, validation
from metax_core.spec import model as spec
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev import chart
from metax_k8s.crd import schema as crd_schema

BASE: dict[str, Any] = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.32.0"}}}
OBJECT = {
    "apiVersion": "gpu.metax-tech.com/v1alpha1",
    "kind": "ClusterOperator",
    "metadata": {"name": "cluster-operator"},
}


def errors_of(document: object) -> list[str]:
    with pytest.raises(InvalidSpec) as caught:
        validation.parse(document)
    return [str(e) for e in caught.value.errors]


def _merged(*parts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = copy.deepcopy(BASE)
    for part in parts:
        stack = [(result, part)]
        while stack:
            into, other = stack.pop()
            for key, value in other.items():
                if isinstance(value, dict) and isinstance(into.get(key), dict):
                    stack.append((into[key], value))
                else:
                    into[key] = copy.deepcopy(value)
    return result


TOLERATION = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
# (what --set-string gives, what --set gives): the same meaning.
PAIRS = [
    ({"gpuDevice": {"deploy": "false"}}, {"gpuDevice": {"deploy": False}}),
    ({"exporter": {"deploy": "true"}}, {"exporter": {"deploy": True}}),
    ({"gpuDevice": {"healthyInterval": "0"}}, {"gpuDevice": {"healthyInterval": 0}}),
    (
        {"gpuDevice": {"healthyInterval": "9", "sgpuShares": "32"}},
        {"gpuDevice": {"healthyInterval": 9, "sgpuShares": 32}},
    ),
    (
        {"exporter": {"deploy": "true", "service": {"type": "NodePort", "port": "30400"}}},
        {"exporter": {"deploy": True, "service": {"type": "NodePort", "port": 30400}}},
    ),
    ({"driver": {"fwEnableVirt": "true"}}, {"driver": {"fwEnableVirt": True}}),
    (
        {"driver": {"upgradePolicy": {"maxParallel": "2", "maxUnavailable": "1", "maxFailureThreshold": "3"}}},
        {"driver": {"upgradePolicy": {"maxParallel": 2, "maxUnavailable": 1, "maxFailureThreshold": 3}}},
    ),
    (
        {
            "driver": {
                "upgradePolicy": {
                    "enableRollout": "true",
                    "pause": "false",
                    "upgradeSteps": [
                        {"replicas": "1", "pause": "false", "toleration": "0"},
                        {"replicas": "100%", "pauseDuration": "10000"},
                    ],
                }
            }
        },
        {
            "driver": {
                "upgradePolicy": {
                    "enableRollout": True,
                    "pause": False,
                    "upgradeSteps": [
                        {"replicas": 1, "pause": False, "toleration": 0},
                        {"replicas": "100%", "pauseDuration": 10000},
                    ],
                }
            }
        },
    ),
    (
        {"tolerations": [{**TOLERATION, "tolerationSeconds": "60"}]},
        {"tolerations": [{**TOLERATION, "tolerationSeconds": 60}]},
    ),
    (
        {"maca": {"podTemplateSpec": {"spec": {"tolerations": [{**TOLERATION, "tolerationSeconds": "5"}]}}}},
        {"maca": {"podTemplateSpec": {"spec": {"tolerations": [{**TOLERATION, "tolerationSeconds": 5}]}}}},
    ),
    (
        {"vfioManager": {"vfioConfig": [{"nodeName": "gpu-.*", "gpus": "1"}]}},
        {"vfioManager": {"vfioConfig": [{"nodeName": "gpu-.*", "gpus": 1}]}},
    ),
]


@pytest.mark.parametrize(("as_strings", "typed"), PAIRS)
def test_a_string_in_chart_values_means_what_helm_set_would_have_made_of_it(
    as_strings: dict[str, Any], typed: dict[str, Any]
) -> None:
    assert validation.parse(_merged(as_strings)) == validation.parse(_merged(typed))


def test_gpus_takes_one_index_as_an_integer_in_the_object_too() -> None:
    """``--set vfioManager.vfioConfig[0].gpus=1`` gives Helm's integer 1; the CRD keeps gpus open."""
    body = _merged({"vfioManager": {"vfioConfig": [{"nodeName": "n", "gpus": 1}]}})
    parsed = validation.parse({**OBJECT, "spec": body})
    assert parsed.vfio_manager.vfio_config[0].gpus == "1"
    for bad in (True, -1, 10000):
        body["vfioManager"]["vfioConfig"][0]["gpus"] = bad
        (error,) = errors_of(body)
        assert error.startswith('vfioManager.vfioConfig[0].gpus: must be "all", comma-separated GPU indexes')


@pytest.mark.parametrize("value", ["09", "+9", "9.0", "1e3", " 9", "9 ", "0x9", "", "1" * 19, "nine"])
def test_strings_helm_keeps_as_strings_are_refused_with_the_path(value: str) -> None:
    assert errors_of(_merged({"gpuDevice": {"healthyInterval": value}})) == [
        f"gpuDevice.healthyInterval: must be an integer, got string {value!r}"
    ]


@pytest.mark.parametrize("value", ["True", "FALSE", "yes", "on", "1", "0", ""])
def test_a_boolean_is_only_true_or_false(value: str) -> None:
    assert errors_of(_merged({"driver": {"fwEnableVirt": value}})) == [
        f"driver.fwEnableVirt: must be true or false, got string {value!r}"
    ]


def test_a_string_integer_still_has_the_field_s_bound() -> None:
    assert errors_of(_merged({"gpuDevice": {"healthyInterval": "-1"}})) == [
        "gpuDevice.healthyInterval: must be between 0 and 86400, got number -1"
    ]
    (error,) = errors_of(_merged({"driver": {"upgradePolicy": {"maxParallel": "100001"}}}))
    assert error.startswith("driver.upgradePolicy.maxParallel: must be an integer from 0 to 100000")


@pytest.mark.parametrize(("as_strings", "_typed"), PAIRS[:-1])
def test_the_object_stays_strict(as_strings: dict[str, Any], _typed: dict[str, Any]) -> None:
    """The CRD types these fields, so the API server refuses a string there: so does the validator."""
    errors = errors_of({**OBJECT, "spec": _merged(as_strings)})
    assert errors and all(re.search(r"must be (true or false|an integer)", e) for e in errors), errors


def test_canonical_leaves_its_input_alone_and_other_fields_as_written() -> None:
    document = _merged({"gpuDevice": {"deploy": "false"}, "registry": "5", "driver": {"payload": {"version": "2"}}})
    before = copy.deepcopy(document)
    result = chart_values.canonical(document)
    assert document == before
    assert result["gpuDevice"]["deploy"] is False
    assert result["registry"] == "5" and result["driver"]["payload"]["version"] == "2"


def test_a_hostile_document_is_walked_by_the_model_not_by_the_input() -> None:
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"spec": deep}
    document = {"gpuDevice": {"podTemplateSpec": deep}, "tolerations": ["x"] * 10, "driver": "none"}
    assert chart_values.canonical(document)["driver"] == "none"


def _leaves(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    for key, node in schema.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        if node.get("type") == "object" and "properties" in node:
            found += _leaves(node, here)
        elif node.get("type") == "array" and "properties" in node.get("items", {}):
            found += _leaves(node["items"], here + "[]")
        else:
            found.append((here, node))
    return found


def test_the_fields_are_exactly_the_spec_s_booleans_and_integers() -> None:
    """Every boolean, integer and int-or-percent field of the CRD, except the two that read strings themselves."""
    expected = {}
    for path, node in _leaves(crd_schema.record_schema(spec.ClusterOperatorSpec)):
        if node.get("type") == "boolean":
            expected[path] = chart_values.Kind.BOOLEAN
        elif node.get("pattern") == f"^{quantity.PATTERN}$":
            continue  # a quantity ("128Mi", 2): its converter reads strings itself
        elif node.get("type") == "integer" or node.get("x-kubernetes-int-or-string"):
            expected[path] = chart_values.Kind.INTEGER
    del expected["driver.upgradePolicy.upgradeSteps[].pauseDuration"]  # "10000" and "10s" in objects too
    assert dict(chart_values.paths()) == expected
    assert "vfioManager.vfioConfig[].gpus" not in expected  # open in the CRD; integers accepted everywhere


def test_the_values_schema_and_the_chart_template_cover_every_field() -> None:
    schema = chart.values_schema()
    template = chart.render_values_template()
    for path, kind in chart_values.paths():
        *parents, last = path.split(".")
        node = chart.schema_at(schema, parents)["properties"][last] if parents else schema["properties"][last]
        strings = [b for b in node["anyOf"] if b.get("type") == "string"]
        assert len(strings) == 1, path
        if kind is chart_values.Kind.BOOLEAN:
            assert strings[0]["enum"] == ["true", "false"], path
        else:
            assert re.fullmatch(strings[0]["pattern"].strip("^$"), "30400"), path
            assert not re.fullmatch(strings[0]["pattern"].strip("^$"), "030400"), path
        keys = " ".join(f'"{key}"' for key in path.split("."))
        assert f'(list {keys}) "kind" "{kind.value}"' in template, path
