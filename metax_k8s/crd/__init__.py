"""The ClusterOperator CustomResourceDefinition, generated from the spec model.

Why generated: the attrs records of `metax_core.spec.model` are the one definition of every chart option, its
type and its default. Writing the OpenAPI schema by hand would be a second definition that drifts. The spec's
schema is walked from the records (`metax_k8s.crd.schema`), the status has its own (`metax_k8s.crd.status`);
this module adds the object around them: names, the status subresource, printer columns and the one-name rule.
The operator brings the live CRD to its release with `metax_k8s.crd.sync`.

Unknown fields: the schema is structural and never sets ``x-kubernetes-preserve-unknown-fields`` except on
``affinity`` (a raw core/v1 Affinity) and ``status.upgradeStatus`` (owned by the rollout machine). So the
API server prunes unknown fields, and refuses them outright with ``fieldValidation=Strict`` (``kubectl
--validate=strict``, the kubectl default) and for every server-side apply.

Regenerate the checked-in file with::

    python -m metax_k8s.crd > charts/metax-operator/crds/clusteroperators.gpu.metax-tech.com.yaml
"""

from __future__ import annotations

import logging
import sys

import yaml

from metax_core import release
from metax_core.cluster import crd_policy
from metax_core.spec import model as spec
from metax_core.wire import meta
from metax_k8s.crd import schema, status
from metax_k8s.crd.schema import Schema

log = logging.getLogger(__name__)

PLURAL = spec.PLURAL
SINGULAR = "clusteroperator"
SHORT_NAMES = ("mxco",)
NAME = f"{PLURAL}.{spec.API_GROUP}"
CHART_PATH = f"charts/metax-operator/crds/{NAME}.yaml"

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
    spec_schema = schema.record_schema(spec.ClusterOperatorSpec)
    spec_schema = {
        "description": schema.class_doc(spec.ClusterOperatorSpec) or "",
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
            "status": status.status_schema(),
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
    """``python -m metax_k8s.crd`` (`metax_k8s.crd.__main__`)."""
    sys.stdout.write(render())
