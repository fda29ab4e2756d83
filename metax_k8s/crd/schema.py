"""The OpenAPI v3 schema of the spec's attrs records: one definition of every option, in the API server's words.

Why a module of its own: the CRD (`metax_k8s.crd`) and the chart's ``values.schema.json`` and README
(`metax_dev.chart`) all describe the same records. This walk turns them into a schema: camelCase names from
`converter.camel_case`, defaults from `converter.unstructure` of the default records, enums from the Enum
classes, descriptions from each field's ``attrs.field(metadata={"description": ...})``, bounds from
`metax_core.spec.limits` (the same table the validator enforces), and what only the API server can enforce:
int-or-string patterns, ranges and CEL rules.
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core.spec import converter, limits, quantity
from metax_core.spec import model as spec

Schema = dict[str, Any]

PERCENT_PATTERN = f"^({limits.PERCENT_PATTERN})$"
"""A percentage from 0% to 100% (int-or-string counts, Table 3.11)."""
DURATION_PATTERN = f"^({limits.DURATION_PATTERN})$"
"""pauseDuration as a string: milliseconds ("10000") or a duration ("10s", "500ms", "2m", "1h")."""

# Constraints the API server can check itself beyond `limits`; the webhook (metax_core.spec.validation) checks
# the rest.
_EXTRA: dict[tuple[type, str], Schema] = {
    (spec.DriverPayload, "name"): {"minLength": 1},
    (spec.VfioConfigEntry, "node_name"): {"minLength": 1},
}

# Whole-schema replacements where the attribute's Python type does not say what a document may hold.
_REPLACE: dict[tuple[type, str], Schema] = {
    (spec.UpgradeStep, "pause_duration"): {
        "x-kubernetes-int-or-string": True,
        "minimum": 0,
        "maximum": limits.range_of(spec.UpgradeStep, "pause_duration").maximum,
        "pattern": DURATION_PATTERN,
    },
    # A comma string or a list: a structural schema has no union of string and array, and the API server
    # cannot compile a CEL rule over an untyped field, so the CRD keeps it as is and the webhook
    # (converter.gpus_text) is the one check (docs/configuration.md, "Deliberately stricter").
    (spec.VfioConfigEntry, "gpus"): {"x-kubernetes-preserve-unknown-fields": True},
}


def _limits(cl: type, name: str, schema: Schema) -> Schema:
    """The field's bounds from `metax_core.spec.limits`, in the schema's words."""
    extra: Schema = {}
    if schema.get("type") == "integer":
        bounds = limits.range_of(cl, name)
        extra.update({"minimum": bounds.minimum, "maximum": bounds.maximum})
    if schema.get("x-kubernetes-int-or-string") and "maximum" not in schema:
        extra["maximum"] = limits.INT_OR_PERCENT_MAX
    if (cl, name) in limits.MAX_ITEMS:
        extra["maxItems"] = limits.MAX_ITEMS[(cl, name)]
    if schema.get("type") == "string" and "enum" not in schema and "format" not in schema:
        extra["maxLength"] = limits.MAX_LENGTH.get((cl, name), limits.MAX_STRING)
    return extra


_RULES: dict[type, list[Schema]] = {
    spec.ExporterService: [
        {
            "rule": "!has(self.port) || self.type == 'NodePort' || self.type == 'LoadBalancer'",
            "message": "port is only used when type is NodePort or LoadBalancer",
            "fieldPath": ".port",
        }
    ],
    spec.UpgradePolicy: [
        {
            "rule": "!self.enableRollout || size(self.upgradeSteps) > 0",
            "message": "upgradeSteps must list at least one step when enableRollout is true",
            "fieldPath": ".upgradeSteps",
        },
        {
            "rule": "!self.enableRollout || size(self.upgradeSteps) == 0"
            " || string(self.upgradeSteps[size(self.upgradeSteps) - 1].replicas) == '100%'",
            "message": 'the last step of upgradeSteps must have replicas "100%" so that every node is upgraded',
            "fieldPath": ".upgradeSteps",
        },
    ],
}


def class_doc(cls: type) -> str | None:
    """The class's own docstring (not an inherited or generated one), with reST double backquotes made single."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or doc.startswith(cls.__name__ + "("):
        return None
    return inspect.cleandoc(doc).replace("``", "`")


def _int_or_percent() -> Schema:
    """An int-or-string: ``minimum`` only applies to integers and ``pattern`` only to strings.

    (A structural schema may not put a ``type`` into ``anyOf`` branches that carry validations.)
    """
    return {
        "x-kubernetes-int-or-string": True,
        "minimum": 0,
        "maximum": limits.INT_OR_PERCENT_MAX,
        "pattern": PERCENT_PATTERN,
    }


def _split_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != len(typing.get_args(tp)) and len(args) == 1:
            return args[0], True
        raise TypeError(f"unsupported union {tp!r}")
    return tp, False


def type_schema(tp: Any, *, strict_enums: bool = True) -> Schema:
    """The OpenAPI v3 schema of one Python type of the model.

    ``strict_enums=False`` (status records) leaves enum fields open strings, with the values in the
    description: the operator writes status, and a newer operator's new value must not be refused.
    """
    origin = typing.get_origin(tp)
    if tp is dt.datetime:
        return {"type": "string", "format": "date-time"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is str:
        return {"type": "string"}
    if tp is spec.IntOrPercent:
        return _int_or_percent()
    if tp is spec.Quantity:
        return {"x-kubernetes-int-or-string": True, "pattern": f"^{quantity.PATTERN}$"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [member.value for member in tp]
        if strict_enums:
            return {"type": "string", "enum": values}
        return {"type": "string", "description": "One of: " + ", ".join(map(str, values)) + "."}
    if isinstance(tp, type) and attrs.has(tp):
        return record_schema(tp, defaults=strict_enums, strict_enums=strict_enums)
    if origin is tuple:
        element, ellipsis = typing.get_args(tp)
        if ellipsis is not Ellipsis:
            raise TypeError(f"only homogeneous tuples are supported, got {tp!r}")
        return {"type": "array", "items": type_schema(element, strict_enums=strict_enums)}
    if origin is Mapping:
        key, value = typing.get_args(tp)
        if key is not str:
            raise TypeError(f"mapping keys must be strings, got {tp!r}")
        if value is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": type_schema(value)}
    raise TypeError(f"no schema for type {tp!r}")


def _default(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_default(v) for v in value]
    return converter.unstructure(value)


def record_schema(cls: type, *, defaults: bool = True, strict_enums: bool = True) -> Schema:
    """The schema of an attrs record: properties in declaration order, required fields, defaults, rules."""
    hints = typing.get_type_hints(cls, globalns=vars(sys.modules[cls.__module__]))
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        inner, nullable = _split_optional(hints[field.name])
        schema = dict(_REPLACE.get((cls, field.name)) or type_schema(inner, strict_enums=strict_enums))
        if defaults:  # spec records; status is written by the operator and keeps its own shapes
            schema.update(_limits(cls, field.name, schema))
        schema.update(_EXTRA.get((cls, field.name), {}))
        description = field.metadata.get(spec.DESCRIPTION)
        if description is None and isinstance(inner, type) and (attrs.has(inner) or issubclass(inner, enum.Enum)):
            description = class_doc(inner)
        if description and "description" in schema:
            description = f"{description} {schema['description']}"
        if description:
            schema["description"] = description
        if "description" in schema:
            schema = {"description": schema.pop("description"), **schema}
        if nullable:
            schema["nullable"] = True
        if field.default is attrs.NOTHING:
            required.append(converter.camel_case(field.name))
        elif field.default is not None and defaults and not _new(cls, field.name):
            schema["default"] = _default(field.default)
        properties[converter.camel_case(field.name)] = schema
    result: Schema = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    if cls in _RULES:
        result["x-kubernetes-validations"] = _RULES[cls]
    return result


def _new(cls: type, name: str) -> bool:
    """A spec field this release added: no default, so it is absent unless set (`spec.NEW_FIELDS`)."""
    return cls is spec.ClusterOperatorSpec and converter.camel_case(name) in spec.NEW_FIELDS
