"""values.schema.json: the CRD's schema as a JSON schema for Helm, widened to the strings chart values may
hold (`metax_core.spec.chart_values`), plus the chart-only ``operator`` section."""

from __future__ import annotations

import json
from typing import Any

from metax_core.spec import chart_values
from metax_core.spec import model as spec
from metax_dev.chart.options import OPERATOR_OPTIONS, Schema
from metax_k8s.crd import schema as crd_schema


def _json_schema(node: Any) -> Any:
    """The CRD's OpenAPI schema as a JSON schema for Helm: closed records, nullable as null, no x- keys."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    if node.get("x-kubernetes-int-or-string"):
        integer: Schema = {"type": "integer", "minimum": node.get("minimum", 0)}
        string: Schema = {"type": "string"}
        if "pattern" in node:
            string["pattern"] = node["pattern"]
        out["anyOf"] = [integer, string]
        if "description" in node:
            out = {"description": node["description"], **out}
        return out
    for key, value in node.items():
        if key.startswith("x-kubernetes") or key in ("nullable", "default"):
            continue
        out[key] = _json_schema(value)
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def schema_at(schema: Schema, keys: list[str]) -> Schema:
    """The node of a ``chart_values.paths`` path (``a.b[].c``) in the values schema."""
    node = schema
    for key in keys:
        node = node["properties"][key.removesuffix("[]")]
        if key.endswith("[]"):
            if "anyOf" in node:  # the global tolerations: a list or the text of a file
                node = next(branch for branch in node["anyOf"] if "array" in branch.get("type", ()))
            node = node["items"]
    return node


def _as_helm_writes_it(node: Schema, kind: chart_values.Kind) -> Schema:
    """``node`` widened to the strings that stand for its value in chart values (`chart_values`)."""
    integer = f"^({chart_values.INTEGER_PATTERN})$"
    branches: list[Schema]
    if kind is chart_values.Kind.BOOLEAN:
        branches = [{"type": "boolean"}, {"type": "string", "enum": list(chart_values.BOOLEANS)}]
    elif "anyOf" in node:  # int-or-percent: an integer, a percentage, or the integer as a string
        number, text = node["anyOf"]
        pattern = text["pattern"].removeprefix("^(").removesuffix(")$")
        branches = [number, {"type": "string", "pattern": f"^({pattern}|{chart_values.INTEGER_PATTERN})$"}]
    else:
        bounds: Schema = {k: node[k] for k in ("minimum", "maximum") if k in node}
        branches = [{"type": "integer", **bounds}, {"type": "string", "pattern": integer}]
    kinds = node.get("type", ())
    if "null" in kinds:
        branches.append({"type": "null"})
    widened: Schema = {"anyOf": branches}
    if "description" in node:
        widened = {"description": node["description"], **widened}
    return widened


def values_schema() -> Schema:
    schema = _json_schema(crd_schema.record_schema(spec.ClusterOperatorSpec))
    for path, kind in chart_values.paths():
        *parents, last = path.split(".")
        parent = schema_at(schema, parents) if parents else schema
        parent["properties"][last] = _as_helm_writes_it(parent["properties"][last], kind)
    tolerations = schema["properties"]["tolerations"]
    # §3.2.4's deprecated `--set-file tolerations=<file>` passes the file's text: a YAML string.
    schema["properties"]["tolerations"] = {
        "description": tolerations.get("description", ""),
        "anyOf": [
            {k: v for k, v in tolerations.items() if k != "description"},
            {"type": "string", "description": "The text of a tolerations file (`--set-file tolerations=<file>`)."},
        ],
    }
    operator: Schema = {"type": "object", "additionalProperties": False, "properties": {}}
    for path, _, option_schema, meaning in OPERATOR_OPTIONS:
        here = operator
        parts = path.split(".")
        for part in parts[:-1]:
            here = here["properties"].setdefault(
                part, {"type": "object", "additionalProperties": False, "properties": {}}
            )
        here["properties"][parts[-1]] = {"description": meaning, **option_schema}
    schema["properties"]["operator"] = {
        "description": "Chart-only settings of the operator Deployment and its webhook (not part of the spec).",
        **operator,
    }
    return {"title": "metax-operator chart values (= the ClusterOperator spec + operator)", **schema}


def render_schema() -> str:
    return json.dumps(values_schema(), indent=2, ensure_ascii=False) + "\n"
