"""The ClusterOperator CustomResourceDefinition, generated from the spec model.

Why generated: the attrs records of `metax_core.spec.model` are the one definition of every chart option, its
type and its default. Writing the OpenAPI schema by hand would be a second definition that drifts. This
module walks the records (camelCase names from `converter.camel_case`, defaults from
`converter.unstructure` of the default records, enums from the Enum classes, descriptions from each field's
``attrs.field(metadata={"description": ...})``, bounds from `metax_core.spec.limits`, the same table the
validator enforces) and adds what only the API server can enforce: int-or-string patterns,
ranges, CEL rules, the status subresource and printer columns.

Unknown fields: the schema is structural and never sets ``x-kubernetes-preserve-unknown-fields`` except on
``affinity`` (a raw core/v1 Affinity) and ``status.upgradeStatus`` (owned by the rollout machine). So the
API server prunes unknown fields, and refuses them outright with ``fieldValidation=Strict`` (``kubectl
--validate=strict``, the kubectl default) and for every server-side apply.

Regenerate the checked-in file with::

    python -m metax_k8s.crd > charts/metax-operator/crds/clusteroperators.gpu.metax-tech.com.yaml
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import logging
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import yaml

from metax_core import release, wording
from metax_core.cluster import crd_policy
from metax_core.rollout import status as rollout_status
from metax_core.spec import converter, limits, quantity
from metax_core.spec import model as spec
from metax_core.wire import meta

log = logging.getLogger(__name__)

PLURAL = spec.PLURAL
SINGULAR = "clusteroperator"
SHORT_NAMES = ("mxco",)
NAME = f"{PLURAL}.{spec.API_GROUP}"
CHART_PATH = f"charts/metax-operator/crds/{NAME}.yaml"

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


def _class_doc(cls: type) -> str | None:
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
            description = _class_doc(inner)
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


def _condition_schema() -> Schema:
    """metav1.Condition, as every Kubernetes API uses it."""
    return {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"description": "The condition's type (CamelCase).", "type": "string", "maxLength": 316},
            "status": {
                "description": "True, False or Unknown.",
                "type": "string",
                "enum": ["True", "False", "Unknown"],
            },
            "observedGeneration": {
                "description": "The metadata.generation the condition was set for.",
                "type": "integer",
                "format": "int64",
                "minimum": 0,
            },
            "lastTransitionTime": {
                "description": "When status last changed.",
                "type": "string",
                "format": "date-time",
            },
            "reason": {"description": "Why, in one CamelCase word.", "type": "string", "maxLength": 1024},
            "message": {
                "description": "Why, for people.",
                "type": "string",
                "maxLength": wording.CONDITION_MESSAGE_LIMIT,
            },
        },
    }


def _upgrade_status_schema() -> Schema:
    """Table 3.16, from `metax_core.rollout.status`; fields a newer operator adds are kept, not pruned."""
    schema = record_schema(rollout_status.UpgradeStatus, defaults=False, strict_enums=False)
    return {
        "description": "Driver rollout state (001 Table 3.16), written by the rollout machine.",
        **schema,
        "x-kubernetes-preserve-unknown-fields": True,
    }


def status_schema() -> Schema:
    """What the operator reports. ``upgradeStatus`` (Table 3.16) is owned by the rollout machine."""
    return {
        "type": "object",
        "description": "Observed state, written by the operator through the status subresource.",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation this status describes.",
            },
            "phase": {
                "type": "string",
                "description": "Summary of the whole installation (Pending, Progressing, Ready, Degraded, Invalid).",
            },
            "readyNodes": {"type": "integer", "description": "GPU nodes where every enabled component works."},
            "totalNodes": {"type": "integer", "description": "GPU nodes the operator manages."},
            "conditions": {
                "type": "array",
                "description": "Ready, SpecValid, and one <Component>Ready condition per component.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": _condition_schema(),
            },
            "componentStatus": {
                "type": "object",
                "description": "Per component (chart key, e.g. gpuDevice): what the operator deployed and how it runs.",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "state": {
                            "type": "string",
                            "description": "Disabled, WaitingForDependencies, Deploying, Ready or Failed.",
                        },
                        "message": {"description": "Why it is in this state.", "type": "string"},
                        "desiredNodes": {"description": "Nodes that should run it.", "type": "integer"},
                        "readyNodes": {"description": "Nodes where it runs and is ready.", "type": "integer"},
                    },
                },
            },
            "components": {
                "type": "array",
                "description": "Per component, in deploy order: enabled, state, pods desired/ready/updated, message.",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The component's chart key (e.g. gpuDevice)."},
                        "enabled": {"type": "boolean", "description": "Whether the spec deploys it."},
                        "state": {"type": "string", "description": "Disabled, Blocked, Deploying, Ready or Failed."},
                        "desired": {"type": "integer", "description": "Pods its DaemonSet/Deployment wants."},
                        "ready": {"type": "integer", "description": "Of those, pods that are ready."},
                        "updated": {"type": "integer", "description": "Of those, pods on the current template."},
                        "message": {"type": "string", "description": "Why it is in this state, for an administrator."},
                    },
                },
            },
            "vfNums": {
                "type": "object",
                "description": "Per node, the VF count its gpu-device pod was started with (R-VF).",
                "additionalProperties": {"type": "integer", "description": "VFs per GPU on that node."},
            },
            "versions": {
                "type": "object",
                "description": "Which release runs (R-UPGRADE): the operator's and the CRD's schema's.",
                "properties": {
                    "operator": {"type": "string", "description": "The running operator's release."},
                    "crd": {
                        "type": "string",
                        "description": "The release whose ClusterOperator schema the API server serves "
                        "(never older than the operator's while it reconciles).",
                    },
                },
            },
            "upgradeStatus": _upgrade_status_schema(),
        },
    }


PRINTER_COLUMNS: list[Schema] = [
    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    {"name": "Progressing", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Progressing')].status"},
    {"name": "Driver Rollout", "type": "string", "jsonPath": ".status.upgradeStatus.phase"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "priority": 1},
    {"name": "Step", "type": "integer", "jsonPath": ".status.upgradeStatus.status.currentStepIndex", "priority": 1},
    {"name": "Nodes", "type": "integer", "jsonPath": ".status.totalNodes", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def openapi_schema() -> Schema:
    spec_schema = record_schema(spec.ClusterOperatorSpec)
    spec_schema = {
        "description": _class_doc(spec.ClusterOperatorSpec) or "",
        **spec_schema,
        "default": {},
    }
    return {
        "type": "object",
        "description": "The MetaX GPU Operator's configuration: one cluster-scoped object named cluster-operator.",
        "properties": {
            "apiVersion": {"description": f"{spec.API_GROUP}/{spec.API_VERSION}", "type": "string"},
            "kind": {"description": spec.KIND, "type": "string"},
            "metadata": {"type": "object"},  # the API server forbids anything else here, a description included
            "spec": spec_schema,
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name == '{spec.OBJECT_NAME}'",
                "message": f"metadata.name must be {spec.OBJECT_NAME}: the operator reconciles only that object",
            }
        ],
    }


def crd() -> Schema:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": NAME,
            "labels": {meta.PART_OF_LABEL: meta.PRODUCT},
            "annotations": {crd_policy.ANNOTATION: release.running()},
        },
        "spec": {
            "group": spec.API_GROUP,
            "scope": "Cluster",
            "names": {
                "kind": spec.KIND,
                "listKind": f"{spec.KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["metax"],
            },
            "versions": [
                {
                    "name": spec.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings as literal blocks, keys in insertion order."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def render() -> str:
    """The checked-in YAML text of the CRD."""
    header = "# GENERATED by `python -m metax_k8s.crd` from metax_core/spec.py: do not edit.\n"
    return header + yaml.dump(crd(), Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
