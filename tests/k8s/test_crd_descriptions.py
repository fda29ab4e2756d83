"""Every field of the generated CRD explains itself (`kubectl explain` never says `<no description>`).

Descriptions come from each record field's ``attrs.field(metadata={"description": ...})`` (issue 9 item 4),
so a new spec field without one fails here, naming its path.
"""

from __future__ import annotations

from typing import Any

from metax_k8s import crd

IMPLICIT = {".metadata"}
"""ObjectMeta: the API server forbids a CRD to say anything about it but its type (its docs are Kubernetes')."""


def _missing(schema: dict[str, Any], path: str) -> list[str]:
    found = []
    for name, child in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if here not in IMPLICIT and not str(child.get("description", "")).strip():
            found.append(here)
        found += _missing(child, here)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _missing(schema[key], f"{path}[*]" if key == "items" else f"{path}.*")
    return found


def test_every_field_of_the_crd_has_a_description() -> None:
    assert _missing(crd.openapi_schema(), "") == []


def test_the_upgrade_policy_fields_named_in_the_report_are_explained() -> None:
    policy = crd.openapi_schema()["properties"]["spec"]["properties"]["driver"]["properties"]["upgradePolicy"]
    for name in ("enableRollout", "pause", "maxFailureThreshold", "upgradeSteps"):
        assert policy["properties"][name]["description"], name


def test_the_walk_finds_a_field_without_one() -> None:
    schema = {"properties": {"a": {"description": "x", "properties": {"b": {"type": "string"}}}}}
    assert _missing(schema, "") == [".a.b"]
