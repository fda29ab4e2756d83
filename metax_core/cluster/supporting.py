"""The objects a component brings beside its workloads and RBAC: the exporter's Service and ServiceMonitor, the
extender's Service, the topology view's ConfigMap, the ``metax`` RuntimeClass and the DRA DeviceClasses.

Why a module of its own: each is rendered from the spec and the catalogue like a workload, but none starts a pod;
`metax_core.cluster.workloads.render` puts them in deploy order with the rest.
"""

from __future__ import annotations

from typing import Any

from metax_core import components
from metax_core.cluster import dra_objects
from metax_core.cluster.render_settings import RenderSettings
from metax_core.components import Component, Workload
from metax_core.metrics import names as metric_names
from metax_core.node import labels as node_labels
from metax_core.runtime import handler
from metax_core.spec import model as spec
from metax_core.topology import cluster_view, extender
from metax_core.wire import meta

APP_LABEL = meta.APP_LABEL
EXPORTER_PORT = metric_names.EXPORTER_PORT
EXPORTER_NAME = "metax-data-exporter"
"""The exporter's DaemonSet, Service and ServiceMonitor."""
SERVICE_MONITOR_API = "monitoring.coreos.com/v1"


def _labels(component: Component, workload: Workload) -> dict[str, str]:
    return meta.object_labels(workload.name, component.value)


def exporter_service(s: spec.ClusterOperatorSpec, settings: RenderSettings) -> dict[str, Any]:
    service = s.exporter.service
    port: dict[str, Any] = {"name": "metrics", "port": EXPORTER_PORT, "targetPort": "metrics", "protocol": "TCP"}
    if service.port is not None and service.type is spec.ServiceType.NODE_PORT:
        port["nodePort"] = service.port
    elif service.port is not None:
        port["port"] = service.port
    labels = _labels(Component.EXPORTER, components.BY_COMPONENT[Component.EXPORTER].workloads[0])
    body: dict[str, Any] = {"type": service.type.value, "ports": [port]}
    if service.type is spec.ServiceType.EXTERNAL_NAME:
        body["externalName"] = service.external_name
    else:
        body["selector"] = {APP_LABEL: labels[APP_LABEL]}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "metax-data-exporter", "namespace": settings.namespace, "labels": labels},
        "spec": body,
    }


def scheduler_service(settings: RenderSettings) -> dict[str, Any]:
    """The Service kube-scheduler calls the extender through (docs/scheduler.md: its ``urlPrefix``)."""
    workload = components.BY_COMPONENT[Component.GPU_SCHEDULER].workloads[0]
    labels = _labels(Component.GPU_SCHEDULER, workload)
    port = {"name": "extender", "port": extender.PORT, "targetPort": "extender", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": workload.name, "namespace": settings.namespace, "labels": labels},
        "spec": {"type": "ClusterIP", "ports": [port], "selector": {APP_LABEL: labels[APP_LABEL]}},
    }


def topology_view(settings: RenderSettings) -> dict[str, Any]:
    """The cluster view's ConfigMap without data: the operator owns the object (and deletes it on uninstall),
    topo-master fills ``data`` under its own field manager (docs/topology.md)."""
    workload = components.BY_COMPONENT[Component.TOPO].workloads[0]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": cluster_view.NAME,
            "namespace": settings.namespace,
            "labels": _labels(Component.TOPO, workload),
        },
    }


def exporter_service_monitor(s: spec.ClusterOperatorSpec, settings: RenderSettings) -> dict[str, Any]:
    """The Prometheus Operator's scrape of the exporter Service. ``honorLabels``: the exporter's ``namespace``,
    ``pod`` and ``container`` name the GPU's holder, not the exporter's pod, and must not become
    ``exported_*`` (dcgm-exporter's users' complaint); scraped at the exporter's sampling pace at most."""
    labels = _labels(Component.EXPORTER, components.BY_COMPONENT[Component.EXPORTER].workloads[0])
    endpoint = {
        "port": "metrics",
        "path": "/metrics",
        "honorLabels": True,
        "interval": f"{s.exporter.sample_interval}s",
    }
    return {
        "apiVersion": SERVICE_MONITOR_API,
        "kind": "ServiceMonitor",
        "metadata": {"name": EXPORTER_NAME, "namespace": settings.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {APP_LABEL: labels[APP_LABEL]}},
            "namespaceSelector": {"matchNames": [settings.namespace]},
            "endpoints": [endpoint],
        },
    }


RUNTIME_CLASS_API = "node.k8s.io/v1"


def runtime_class() -> dict[str, Any]:
    """The RuntimeClass ``metax``: pods that name it (``runtimeClassName: metax``) run through the node's
    ``metax`` runtime handler (the wrapper that gives them the SDK their ``METAX_MACA_VERSION`` asks for,
    docs/maca.md), and only on GPU nodes (its ``scheduling.nodeSelector`` is added to theirs). It goes with the
    container-runtime component, which configures that handler on every GPU node."""
    return {
        "apiVersion": RUNTIME_CLASS_API,
        "kind": "RuntimeClass",
        "metadata": {
            "name": handler.RUNTIME_HANDLER,
            "labels": meta.object_labels(handler.RUNTIME_HANDLER, Component.RUNTIME.value),
        },
        "handler": handler.RUNTIME_HANDLER,
        "scheduling": {"nodeSelector": {node_labels.GPU_INSTALLED: node_labels.TRUE}},
    }


def cluster_objects(component: Component) -> list[dict[str, Any]]:
    """The cluster-scoped objects a component brings besides its RBAC (applied with it, pruned without it)."""
    if component is Component.RUNTIME:
        return [runtime_class()]
    if component is Component.DRA_DRIVER:
        return dra_objects.device_classes()
    return []
