"""What the in-memory API server serves: the built-in kinds the operator touches, and CRD-defined ones.

Why a table: the real server's discovery says whether a kind is namespaced, whether it has a status
subresource and whether it counts ``metadata.generation``; the in-memory server must answer the same, and
must serve a custom kind only once its CustomResourceDefinition exists (as the real one does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs


@attrs.frozen
class KindInfo:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = False
    """Has a status subresource: writes to the main resource ignore ``status`` and vice versa."""
    generation: bool = False
    """Counts ``metadata.generation`` up on every change outside metadata and status."""
    schema: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    """The openAPIV3Schema of a custom kind (defaults, pruning, validation)."""
    custom: bool = False


def _k(
    api_version: str, kind: str, plural: str, namespaced: bool, status: bool = False, generation: bool = False
) -> KindInfo:
    return KindInfo(api_version, kind, plural, namespaced, status, generation)


BUILTIN: tuple[KindInfo, ...] = (
    _k("v1", "Namespace", "namespaces", False, status=True),
    _k("v1", "Node", "nodes", False, status=True),
    _k("v1", "ConfigMap", "configmaps", True),
    _k("v1", "Secret", "secrets", True),
    _k("v1", "ServiceAccount", "serviceaccounts", True),
    _k("v1", "Service", "services", True, status=True),
    _k("v1", "Pod", "pods", True, status=True, generation=True),
    _k("v1", "Event", "events", True),
    _k("apps/v1", "DaemonSet", "daemonsets", True, status=True, generation=True),
    _k("apps/v1", "Deployment", "deployments", True, status=True, generation=True),
    _k("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    _k("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _k("rbac.authorization.k8s.io/v1", "Role", "roles", True),
    _k("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
    _k("coordination.k8s.io/v1", "Lease", "leases", True),
    _k("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True, status=True, generation=True),
    _k("events.k8s.io/v1", "Event", "events", True),
    _k("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False, True, True),
    _k(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        False,
        generation=True,
    ),
    _k(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        False,
        generation=True,
    ),
    _k("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", False),
    _k("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True, generation=True),
    _k("resource.k8s.io/v1", "DeviceClass", "deviceclasses", False, generation=True),
    _k("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
    _k("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False),
    _k("resource.k8s.io/v1", "ResourceClaim", "resourceclaims", True, status=True),
    _k("resource.k8s.io/v1", "DeviceClass", "deviceclasses", False, generation=True),
)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def from_crd(crd: Mapping[str, Any]) -> list[KindInfo]:
    """The kinds a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    kinds = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        kinds.append(
            KindInfo(
                api_version=f"{spec['group']}/{version['name']}",
                kind=names["kind"],
                plural=names["plural"],
                namespaced=spec.get("scope") == "Namespaced",
                status="status" in (version.get("subresources") or {}),
                generation=True,
                schema=schema,
                custom=True,
            )
        )
    return kinds
