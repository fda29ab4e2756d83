"""The exporter's ServiceMonitor on the real API server (C8, R-EXPORTER): rendered only while the Prometheus
Operator's ``servicemonitors.monitoring.coreos.com`` CRD exists, discovered by the operator.

Aspects: without the CRD the exporter gets its Service and no ServiceMonitor (and the operator does not fail);
installing the CRD, with no CR edit, makes the operator create it (it watches the CRD by name), selecting the
Service's pods on the named port with ``honorLabels`` (the holders' ``namespace``/``pod`` must not become
``exported_*``); disabling the exporter prunes it. The CRD is a minimal one of the real group, kind and
plural, removed afterwards.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core.cluster import render_settings, supporting
from metax_core.errors import ClusterError
from tests.support.cluster import wait_served

pytestmark = pytest.mark.integration

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": render_settings.SERVICE_MONITOR_CRD},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
            "listKind": "ServiceMonitorList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def service_monitor(env: Env) -> dict[str, Any] | None:
    try:
        return env.api.get(supporting.SERVICE_MONITOR_API, "ServiceMonitor", supporting.EXPORTER_NAME, NS)
    except ClusterError:
        return None


def service(env: Env) -> dict[str, Any] | None:
    try:
        return env.api.get("v1", "Service", supporting.EXPORTER_NAME, NS)
    except ClusterError:
        return None


def crd_present(env: Env) -> bool:
    try:
        env.api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", render_settings.SERVICE_MONITOR_CRD)
        return True
    except ClusterError:
        return False


def test_the_service_monitor_follows_the_prometheus_operators_crd(operator_env: Env) -> None:
    env = operator_env
    with contextlib.suppress(ClusterError):
        env.api.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", render_settings.SERVICE_MONITOR_CRD)
    wait_for("no ServiceMonitor CRD", lambda: not crd_present(env), timeout=60)
    spec = cluster_operator()["spec"]
    spec["exporter"] = {"deploy": True, "service": {"type": "NodePort", "port": 30940}}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    env.start_operator()
    try:
        svc = wait_for("the exporter Service", lambda: service(env), timeout=120)
        assert svc["spec"]["type"] == "NodePort" and svc["spec"]["ports"][0]["nodePort"] == 30940
        # the Service is applied before every workload (workloads.in_apply_order): the DaemonSet may come after
        wait_for("the exporter DaemonSet", lambda: "metax-data-exporter" in env.daemonsets(), timeout=60)

        env.api.create(CRD)  # no CR edit: the operator watches the CRD by name and reconciles at once
        wait_served(env.api, supporting.SERVICE_MONITOR_API, "ServiceMonitor", timeout=60)
        monitor = wait_for("the ServiceMonitor", lambda: service_monitor(env), timeout=120)
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
        assert endpoint["honorLabels"] is True
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= svc["spec"]["selector"].items()
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NS]}

        spec["exporter"] = {"deploy": False}
        env.api.apply(cluster_operator(spec), field_manager="helm")
        wait_for("the ServiceMonitor pruned", lambda: service_monitor(env) is None, timeout=120)
        wait_for("the Service pruned", lambda: service(env) is None, timeout=120)
    finally:
        with contextlib.suppress(ClusterError):
            env.api.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", render_settings.SERVICE_MONITOR_CRD)
