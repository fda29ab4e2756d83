"""The generated ClusterOperator CRD (metax_k8s.crd), without an API server.

Covered: the checked-in chart file is exactly what the generator prints; every spec field appears under its
camelCase name; defaults in the schema, applied the way the API server applies them, give the model's
default spec; enums, int-or-string and nullable come from the model; the schema is structural (a type at
every level except int-or-string and preserve-unknown nodes); unsupported model types are refused.
The API server's own verdict on the schema is in tests/integration/test_crd.py.
"""

from __future__ import annotations

import copy
import enum
import pathlib
import re
import subprocess
import sys
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import yaml

from metax_core.spec import converter, quantity
from metax_core.spec import model as spec
from metax_k8s import crd
from metax_k8s.crd import schema as crd_schema
from metax_k8s.crd import status as crd_status

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _spec_schema() -> dict[str, Any]:
    return crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Structural defaulting as kube-apiserver does it: parent default first, then into the children."""
    if isinstance(value, dict):
        for key, prop in schema.get("properties", {}).items():
            if key not in value and "default" in prop:
                value[key] = copy.deepcopy(prop["default"])
        for key, child in value.items():
            if key in schema.get("properties", {}):
                _apply_defaults(child, schema["properties"][key])
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _apply_defaults(item, schema["items"])
    return value


def test_checked_in_file_is_the_generated_one() -> None:
    checked_in = (ROOT / crd.CHART_PATH).read_text()
    assert checked_in == crd.render(), f"regenerate with: python -m metax_k8s.crd > {crd.CHART_PATH}"


def test_module_entry_point_prints_the_crd() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "metax_k8s.crd"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert yaml.safe_load(result.stdout) == crd.crd()


def test_names_scope_and_subresource() -> None:
    document = yaml.safe_load(crd.render())
    assert document["metadata"]["name"] == "clusteroperators.gpu.metax-tech.com"
    assert document["spec"]["scope"] == "Cluster"
    assert document["spec"]["names"]["kind"] == "ClusterOperator"
    assert "mxco" in document["spec"]["names"]["shortNames"]
    version = document["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["storage"] and version["served"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Step"] == ".status.upgradeStatus.status.currentStepIndex"
    assert columns["Ready"] == ".status.conditions[?(@.type=='Ready')].status"
    assert columns["Progressing"] == ".status.conditions[?(@.type=='Progressing')].status"
    assert columns["Driver Rollout"] == ".status.upgradeStatus.phase"
    assert columns["Age"] == ".metadata.creationTimestamp"


def _walk_records(cls: type, schema: Mapping[str, Any], path: str, seen: list[str]) -> None:
    hints = typing.get_type_hints(cls)  # resolved in the module that defines the class
    for field in attrs.fields(cls):
        key = converter.camel_case(field.name)
        assert key in schema["properties"], f"{path}.{key} missing from the schema"
        here = schema["properties"][key]
        seen.append(f"{path}.{key}")
        inner = hints[field.name]
        args = [a for a in typing.get_args(inner) if a is not type(None)]
        if type(None) in typing.get_args(inner):
            assert here.get("nullable") is True, f"{path}.{key} allows null in the model"
            inner = args[0]
        else:
            assert "nullable" not in here, f"{path}.{key} does not allow null in the model"
        if inner is spec.Quantity:
            assert here["x-kubernetes-int-or-string"] is True and here["pattern"] == f"^{quantity.PATTERN}$"
            continue
        if typing.get_origin(inner) is tuple:
            assert here["type"] == "array"
            inner, here = typing.get_args(inner)[0], here["items"]
        if inner is spec.IntOrPercent:
            assert here["x-kubernetes-int-or-string"] is True
        elif isinstance(inner, type) and attrs.has(inner):
            _walk_records(inner, here, f"{path}.{key}", seen)
        elif isinstance(inner, type) and issubclass(inner, enum.Enum):
            assert here["enum"] == [m.value for m in inner]


def test_every_model_field_is_in_the_schema() -> None:
    seen: list[str] = []
    _walk_records(spec.ClusterOperatorSpec, _spec_schema(), "spec", seen)
    assert "spec.driver.upgradePolicy.upgradeSteps.replicas" in seen
    assert "spec.vfioManager.vfioConfig.nodeName" in seen
    assert "spec.exporter.service.port" in seen


def test_defaults_applied_by_the_server_give_the_model_defaults() -> None:
    defaulted = _apply_defaults({}, _spec_schema())
    assert converter.structure(defaulted, spec.ClusterOperatorSpec) == spec.ClusterOperatorSpec()
    assert defaulted["driver"]["upgradePolicy"]["maxParallel"] == "100%"
    assert defaulted["gpuDevice"]["healthyInterval"] == 5
    assert "version" not in defaulted["driver"]["payload"]


def test_defaults_reach_into_list_items() -> None:
    document = {"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 1}]}}}
    defaulted = _apply_defaults(document, _spec_schema())
    assert defaulted["driver"]["upgradePolicy"]["upgradeSteps"][0]["toleration"] == "0%"


def test_int_or_string_fields_carry_a_percent_pattern() -> None:
    policy = _spec_schema()["properties"]["driver"]["properties"]["upgradePolicy"]["properties"]
    for key in ("maxParallel", "maxUnavailable"):
        assert policy[key]["x-kubernetes-int-or-string"] is True
        assert policy[key]["pattern"] == crd_schema.PERCENT_PATTERN and policy[key]["minimum"] == 0
        assert "type" not in policy[key] and "anyOf" not in policy[key]
    step = policy["upgradeSteps"]["items"]["properties"]
    assert step["replicas"]["x-kubernetes-int-or-string"] is True
    assert step["pauseDuration"]["x-kubernetes-int-or-string"] is True


@pytest.mark.parametrize(
    ("text", "matches"),
    [("0%", True), ("50%", True), ("100%", True), ("101%", False), ("50", False), ("5 %", False), ("%", False)],
)
def test_percent_pattern(text: str, matches: bool) -> None:
    assert bool(re.match(crd_schema.PERCENT_PATTERN, text)) is matches


def _check_structural(schema: Mapping[str, Any], path: str) -> None:
    special = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    assert "type" in schema or special, f"{path} has no type: not a structural schema"
    assert "additionalProperties" not in schema or "properties" not in schema, f"{path}: both kinds of keys"
    for key, child in schema.get("properties", {}).items():
        _check_structural(child, f"{path}.{key}")
    if "items" in schema:
        _check_structural(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        _check_structural(schema["additionalProperties"], f"{path}.*")


def test_schema_is_structural_and_only_affinity_gpus_peers_and_upgrade_status_keep_unknown_fields() -> None:
    root = crd.openapi_schema()
    _check_structural(root, "")
    text = yaml.safe_dump(root)
    # affinity appears once per podTemplateSpec (global + 10 components); vfioConfig[].gpus (a string or a
    # list, checked by its CEL rule) and upgradeStatus once each; the NetworkPolicy peers (passed to the API server,
    # which checks them) of the exporter and the extender.
    assert text.count("x-kubernetes-preserve-unknown-fields") == 15
    assert root["properties"]["status"]["properties"]["upgradeStatus"]["x-kubernetes-preserve-unknown-fields"]


def test_cel_rules_are_present() -> None:
    root = crd.openapi_schema()
    assert "self.metadata.name == 'cluster-operator'" in root["x-kubernetes-validations"][0]["rule"]
    exporter = _spec_schema()["properties"]["exporter"]["properties"]["service"]
    assert "NodePort" in exporter["x-kubernetes-validations"][0]["rule"]
    policy = _spec_schema()["properties"]["driver"]["properties"]["upgradePolicy"]
    assert any("100%" in r["rule"] for r in policy["x-kubernetes-validations"])


def test_descriptions_come_from_the_field_metadata() -> None:
    device = _spec_schema()["properties"]["gpuDevice"]
    assert device["description"] == attrs.fields(spec.ClusterOperatorSpec).gpu_device.metadata[spec.DESCRIPTION]
    assert "0 disables" in device["properties"]["healthyInterval"]["description"]


def test_unsupported_types_are_refused() -> None:
    with pytest.raises(TypeError, match="no schema for type"):
        crd_schema.type_schema(float)
    with pytest.raises(TypeError, match="mapping keys must be strings"):
        crd_schema.type_schema(Mapping[int, str])
    with pytest.raises(TypeError, match="homogeneous tuples"):
        crd_schema.type_schema(tuple[int, str])


def test_a_full_upgrade_status_fits_the_status_schema() -> None:
    import datetime as dt

    from metax_core.rollout import status as rs
    from metax_k8s.inmemory import schema as inmemory_schema

    moment = dt.datetime(2024, 5, 1, 8, 0, 0, 123456, tzinfo=dt.UTC)
    status = rs.UpgradeStatus(
        last_applied_spec="{}",
        upgrading=True,
        conditions=(
            rs.Condition(
                rs.ConditionType.PROGRESSING, rs.ConditionStatus.TRUE, moment, rs.Reason.STEP_UPGRADING, "step 1"
            ),
        ),
        phase=rs.Phase.PROGRESSING,
        status=rs.StepStatus(
            current_step_index=1,
            current_step_state=rs.StepState.STEP_PAUSED,
            recheck_time=moment,
            current_step_nodes=("n1",),
        ),
    )
    document = {"upgradeStatus": rs.to_document(status), "phase": "Progressing", "readyNodes": 3}
    errors: list[str] = []
    checked = inmemory_schema.walk(document, crd_status.status_schema(), "status", errors, strict=True)
    assert errors == []
    assert checked == document  # nothing pruned, nothing defaulted
    assert rs.from_document(checked["upgradeStatus"]) == status


def test_a_field_this_release_added_has_no_default_so_an_older_release_never_reads_it_back() -> None:
    """R-UPGRADE: a CRD default is written into cluster-operator on every read; after ``helm rollback`` the previous
    release would read a field it does not know and refuse the spec (docs/upgrade.md, "New fields")."""
    properties = crd.openapi_schema()["properties"]["spec"]["properties"]
    assert spec.NEW_FIELDS
    for name in spec.NEW_FIELDS:
        assert "default" not in properties[name], name
    assert "default" in properties["driver"]  # the others keep theirs
