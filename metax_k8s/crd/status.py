"""The schema of what the operator reports in cluster-operator's ``status`` (Table 3.16 for the rollout's part).

Why a module of its own: the spec's schema is walked from the records users write (`schema`); the status is
written by the operator through the status subresource and keeps its own shapes (conditions as every Kubernetes
API has them, per-component states, the rollout machine's ``upgradeStatus``, whose fields a newer operator may
add and are kept, not pruned).
"""

from __future__ import annotations

from metax_core import wording
from metax_core.rollout import status as rollout_status
from metax_k8s.crd.schema import Schema, record_schema


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
