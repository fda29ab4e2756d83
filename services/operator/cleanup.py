"""The finalizer: deleting ``cluster-operator`` removes everything the operator created, then lets it go.

Why a module of its own: `helm uninstall --wait` (R-INSTALL) relies on it, and it must be complete and safe:
only objects carrying our managed-by label are deleted (DaemonSets, Deployments, Services, ConfigMaps and the
components' ServiceAccounts, Roles and RoleBindings in the operator's namespace, the events Roles and
RoleBindings in ``default``, and the components' ClusterRoles and ClusterRoleBindings), and on every node only
the label and annotation keys the product writes (``metax-tech.com/...``, except the three an administrator sets:
gpu-device mode, qos-policy and gpu.allocation). The finalizer is removed last, so an interrupted cleanup is
simply done again by the next reconcile.

Before it deletes anything the agents read (driver-config, metax-vfio-config, the DaemonSets), it asks
every node that runs one of our agents to undo what the agents did on the host and waits for their answers
(`metax_core.node.uninstall`: the request and the answers are node annotations):
`metax_core.cluster.node_undos` says, from the operator's caches, which agents run where; the wait is
bounded (`Settings.uninstall_timeout`, counted
from the CR's deletionTimestamp, so an operator restart does not start it again).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from metax_core.cluster import network_policies, rbac, render_settings, supporting
from metax_core.dra import DRIVER
from metax_core.dra import classes as dra_classes
from metax_core.dra import slices as dra_slices
from metax_core.errors import ClusterError, NotServed
from metax_core.node import allocation, devices, labels
from metax_core.node.labels import PREFIX
from metax_core.ports.cluster import NodeMetadata, Objects, RawObject
from metax_core.wire import meta
from services.operator import applier

log = logging.getLogger(__name__)

FINALIZER = meta.CLEANUP_FINALIZER
OWNED_KINDS = (
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    (network_policies.API_VERSION, network_policies.KIND),
)
ADMIN_LABELS = frozenset({devices.MODE_LABEL, devices.QOS_LABEL, allocation.LABEL, labels.MULTI_HOST_INTERCONNECT})
"""Set by the administrator (R-SGPU, R-DRA), not by the product: left on the node."""


def product_keys(keys: Iterable[str]) -> list[str]:
    return sorted(k for k in keys if k.startswith(PREFIX) and k not in ADMIN_LABELS)


def serves_service_monitors(objects: Objects) -> bool:
    """Whether the cluster has the Prometheus Operator's ServiceMonitor CRD, asked of the API server (the uninstall
    asks it once; the reconciler reads its watch of the CRD instead)."""
    try:
        crd = objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", render_settings.SERVICE_MONITOR_CRD)
    except ClusterError as exc:
        log.warning(
            "cannot tell whether %s exists, rendering no ServiceMonitor: %s", render_settings.SERVICE_MONITOR_CRD, exc
        )
        return False
    return crd is not None


def service_monitor(objects: Objects, namespace: str) -> RawObject | None:
    """The exporter's live ServiceMonitor (with apiVersion and kind), None when absent. Only asked where the
    cluster serves ServiceMonitors (`serves_service_monitors`, or the reconciler's watch of their CRD)."""
    found = objects.get(supporting.SERVICE_MONITOR_API, "ServiceMonitor", supporting.EXPORTER_NAME, namespace)
    return None if found is None else {"apiVersion": supporting.SERVICE_MONITOR_API, "kind": "ServiceMonitor", **found}


def withdraw_slices(objects: Objects) -> None:
    """Delete the DRA driver's ResourceSlices on every node (R-DRA): once its pods are gone nobody prepares
    those devices, so the scheduler must not allocate them. They carry no managed-by label (the driver writes
    them, the Node owns them), so they are found by driver."""
    try:
        found = objects.list(dra_slices.API_VERSION, dra_slices.KIND, field_selector=f"spec.driver={DRIVER}").items
    except NotServed:
        return  # resource.k8s.io/v1 is not served before Kubernetes 1.34: no slices
    for item in found:
        name = str((item.get("metadata") or {}).get("name", ""))
        if objects.delete(dra_slices.API_VERSION, dra_slices.KIND, name):
            log.info("deleted ResourceSlice %s: the DRA driver no longer runs", name)


def remove_everything(
    objects: Objects, nodes: NodeMetadata, apply: applier.Applier, namespace: str, node_list: Iterable[RawObject]
) -> None:
    """Delete our objects and node keys."""
    selector = meta.MANAGED_SELECTOR
    # The workloads first, then the RBAC that they use.
    where: list[tuple[str, str, str | None]] = [(v, k, namespace) for v, k in OWNED_KINDS]
    where += rbac.locations(namespace)
    where.append((supporting.RUNTIME_CLASS_API, "RuntimeClass", None))
    where.append((dra_classes.API_VERSION, dra_classes.KIND, None))
    for api_version, kind, scope in where:
        try:
            found = objects.list(api_version, kind, namespace=scope, label_selector=selector).items
        except NotServed:
            continue  # DeviceClasses on a cluster older than Kubernetes 1.34: none to delete
        for obj in found:
            apply.prune({"apiVersion": api_version, "kind": kind, **obj}, "cluster-operator is being deleted")
    withdraw_slices(objects)
    monitor = service_monitor(objects, namespace) if serves_service_monitors(objects) else None
    if monitor is not None:
        apply.prune(monitor, "cluster-operator is being deleted")
    for node in node_list:
        metadata = node.get("metadata") or {}
        labels = product_keys((metadata.get("labels") or {}).keys())
        annotations = product_keys((metadata.get("annotations") or {}).keys())
        if labels or annotations:
            nodes.patch_node_metadata(
                str(metadata["name"]),
                labels=dict.fromkeys(labels),
                annotations=dict.fromkeys(annotations),
            )
            log.info("node %s: removed %s", metadata["name"], ", ".join(labels + annotations))
