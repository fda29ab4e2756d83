"""Admission for the in-memory API server: what kube-apiserver refuses, defaults or prunes on a write.

Why: the demo and the fast tests must fail where the real server fails. Covered: object names, label and
annotation syntax, the required fields of events.k8s.io/v1 Events, and for custom resources the CRD's
structural schema — unknown fields (refused, as with ``fieldValidation=Strict`` and server-side apply),
types, int-or-string, nullable, enums, patterns, ranges, list sizes, required fields and defaults applied
parent first. Not covered: CEL rules (``x-kubernetes-validations``); the integration suite checks those
against the real server. Messages follow the real server's wording.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from metax_core.errors import ClusterError
from metax_k8s.inmemory import kinds, select

Schema = Mapping[str, Any]


def _json(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _type_ok(value: object, type_name: str) -> bool:
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[type_name])


def _scalar_checks(value: Any, schema: Schema, path: str, errors: list[str]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_json(v) for v in schema["enum"])
        errors.append(f"{path}: Unsupported value: {_json(value)}: supported values: {allowed}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: Invalid value: {_json(value)}: {path} in body should match '{schema['pattern']}'")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(
                f"{path}: Invalid value: {_json(value)}: "
                f"{path} in body should be at least {schema['minLength']} chars long"
            )
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(
                f"{path}: Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}"
            )
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(
                f"{path}: Invalid value: {value}: {path} in body should be less than or equal to {schema['maximum']}"
            )


def _int_or_string(value: Any, schema: Schema, path: str, errors: list[str]) -> None:
    if not (_type_ok(value, "integer") or isinstance(value, str)):
        errors.append(f"{path}: Invalid value: {_json(value)}: {path} in body must be of type integer or string")
        return
    _scalar_checks(value, schema, path, errors)  # pattern applies to strings only, minimum to numbers only


_SSA_TYPES = {
    "integer": "numeric (int or float)",
    "number": "numeric (int or float)",
    "string": "string",
    "boolean": "boolean",
    "object": "map",
    "array": "list",
}


def walk(value: Any, schema: Schema, path: str, errors: list[str], *, strict: bool, typed: bool = False) -> Any:
    """``value`` checked against ``schema``, with defaults added and unknown fields pruned (or refused).

    ``typed=True`` is server-side apply's first check of an apply configuration (a partial object): only
    types and unknown fields, worded as structured-merge-diff words them; no defaults, no required fields,
    no value rules (those run on the merged object).
    """
    if value is None:
        if not schema.get("nullable") and not typed:
            errors.append(
                f'{path}: Invalid value: "null": {path} in body must be of type {schema.get("type", "object")}'
            )
        return value
    if schema.get("x-kubernetes-int-or-string"):
        if typed:
            if not (_type_ok(value, "integer") or isinstance(value, str)):
                errors.append(f".{path}: expected numeric (int or float) or string, got {_json(value)}")
        else:
            _int_or_string(value, schema, path, errors)
        return value
    type_name = schema.get("type")
    if type_name and not _type_ok(value, type_name):
        shown = _json(value) if not isinstance(value, (dict, list)) else type(value).__name__
        if typed:
            errors.append(f".{path}: expected {_SSA_TYPES[type_name]}, got {shown}")
        else:
            errors.append(
                f"{path}: Invalid value: {shown}: "
                f"{path} in body must be of type {type_name}: {_json(type(value).__name__)}"
            )
        return value
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        result: dict[str, Any] = {}
        for key, child in value.items():
            here = f"{path}.{key}" if path else key
            if key in properties:
                result[key] = walk(child, properties[key], here, errors, strict=strict, typed=typed)
            elif isinstance(extra, Mapping):
                result[key] = walk(child, extra, here, errors, strict=strict, typed=typed)
            elif preserve or extra is True or (not properties and type_name is None):
                result[key] = child
            elif typed:
                errors.append(f".{here}: field not declared in schema")
            elif strict:
                errors.append(f'unknown field "{here}"')
        if not typed:
            for key, prop in properties.items():
                if key not in result and "default" in prop:
                    here = f"{path}.{key}" if path else key
                    result[key] = walk(copy.deepcopy(prop["default"]), prop, here, errors, strict=strict)
            for key in schema.get("required") or []:
                if key not in result:
                    errors.append(f"{path}.{key}: Required value" if path else f"{key}: Required value")
        return result
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"] and not typed:
            errors.append(f"{path}: Too many: {len(value)}: must have at most {schema['maxItems']} items")
        items = schema.get("items") or {}
        return [walk(v, items, f"{path}[{i}]", errors, strict=strict, typed=typed) for i, v in enumerate(value)]
    if not typed:
        _scalar_checks(value, schema, path, errors)
    return value


_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def _metadata_errors(obj: Mapping[str, Any]) -> list[str]:
    metadata = obj.get("metadata") or {}
    errors = []
    name = str(metadata.get("name", ""))
    rbac = str(obj.get("apiVersion", "")).startswith("rbac.authorization.k8s.io/")
    problem = select.path_segment_problem(name) if rbac else select.dns_subdomain_problem(name)
    if problem:
        errors.append(f"metadata.name: Invalid value: {problem}")
    for key, value in (metadata.get("labels") or {}).items():
        problem = select.label_key_problem(key) or select.label_value_problem(value)
        if problem:
            errors.append(f"metadata.labels: Invalid value: {problem}")
    for key, value in (metadata.get("annotations") or {}).items():
        problem = select.label_key_problem(key)
        if problem or not isinstance(value, str):
            errors.append(f"metadata.annotations: Invalid value: {problem or f'value of {key!r} must be a string'}")
    return errors


def _event_errors(obj: Mapping[str, Any]) -> list[str]:
    errors = [
        f"{field}: Required value"
        for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason", "regarding")
        if not obj.get(field)
    ]
    if obj.get("type") not in ("Normal", "Warning"):
        errors.append(f'type: Unsupported value: {_json(obj.get("type"))}: supported values: "Normal", "Warning"')
    if len(str(obj.get("note", "")).encode()) > 1024:
        errors.append("note: Too long: must have at most 1024 bytes")
    series = obj.get("series")
    if series is not None and int(series.get("count", 0)) < 2:
        errors.append("series.count: Invalid value: should be at least 2")
    return errors


def admit(info: kinds.KindInfo, obj: dict[str, Any], what: str, *, strict: bool, typed: bool = False) -> dict[str, Any]:
    """``obj`` as the server would store it, or a `ClusterError` listing every problem.

    ``typed=True`` checks a server-side apply configuration the way the real server first types it:
    unknown fields and wrong types fail with HTTP 500 ``failed to create typed patch object`` (not
    retryable: see `retry.error_for`); value rules wait for the merged object (422).
    """
    errors = [] if typed else _metadata_errors(obj)
    if info.api_version == "events.k8s.io/v1" and not typed:
        errors += _event_errors(obj)
    result = obj
    if info.schema is not None:
        body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
        properties = {k: v for k, v in (info.schema.get("properties") or {}).items() if k not in _ROOT_FIELDS}
        checked = walk(body, {**info.schema, "properties": properties}, "", errors, strict=strict, typed=typed)
        result = {**{k: obj[k] for k in _ROOT_FIELDS if k in obj}, **checked}
    if not errors:
        return result
    name = (obj.get("metadata") or {}).get("name")
    if typed:
        listed = errors[0] if len(errors) == 1 else "errors:\n" + "\n".join(f"  {e}" for e in errors)
        detail = f"failed to create typed patch object (/{name}; {info.api_version}, Kind={info.kind}): {listed}"
        raise ClusterError("apply", what, detail, 500)
    group = info.api_version.split("/")[0] if "/" in info.api_version else ""
    qualified = f"{info.kind}.{group}" if group else info.kind
    raise ClusterError("write", what, f'{qualified} "{name}" is invalid: ' + ", ".join(errors), 422)
