"""Who may reach the ports the product's pods listen on (issue 38 item 4; seed 000 §1.3.4 recommends NetworkPolicy).

Why a module of its own: the listening surface is one table a security review reads (docs/security.md, "Network"):

* the operator (webhook and probes), port 9443 (HTTPS): the API server and the kubelet's probes; rendered by the
  chart (``templates/network-policy.yaml``);
* data-exporter, port 9400 (``/metrics``): Prometheus, i.e. pods labelled ``app.kubernetes.io/name: prometheus`` in
  any namespace (the label the Prometheus Operator and the prometheus-community chart give its pods), or
  ``exporter.networkPolicy.allowedFrom``; rendered here;
* gpu-scheduler (the extender), port 8088: kube-scheduler, which runs on the control plane's host network, so any
  source by default and ``gpuScheduler.networkPolicy.allowedFrom`` (an ipBlock of the control-plane nodes) to
  narrow it; rendered here.

Each policy selects its component's pods and admits only its port, only from those peers; every other ingress to
those pods is refused. Every other workload listens on no port (the agents talk to the kubelet over unix sockets on
the host): each gets a policy of its own that admits nothing, so no pod of the product is open by omission.
Egress is not restricted: every pod's traffic out
is to the API server, whose address a NetworkPolicy cannot name portably. A NetworkPolicy needs a CNI that enforces
it (Calico, Cilium, …); on one that does not, these objects are inert and say so to nobody — docs/security.md.

The exporter's policy is off by default behind a NodePort or LoadBalancer Service: its scrapers are outside the
cluster, where no peer selector reaches (turn it on with ``exporter.networkPolicy.enabled`` and an ipBlock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metax_core.components import Component
from metax_core.metrics import names as metric_names
from metax_core.spec import model as spec
from metax_core.topology import extender
from metax_core.wire import meta

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
PROMETHEUS_LABEL = {meta.APP_LABEL: "prometheus"}
PROMETHEUS: tuple[Mapping[str, Any], ...] = (
    {"namespaceSelector": {}, "podSelector": {"matchLabels": PROMETHEUS_LABEL}},
)
"""The exporter's default peers: Prometheus pods in any namespace."""
EXTERNAL = (spec.ServiceType.NODE_PORT, spec.ServiceType.LOAD_BALANCER)


def policy(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    port: int | None,
    peers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Admit TCP ``port`` of the pods named ``name`` (their ``app.kubernetes.io/name``) from ``peers`` only (none:
    from anywhere, to that port alone); ``port`` None: admit nothing."""
    ingress: list[dict[str, Any]] = []
    if port is not None:
        rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
        if peers:
            rule["from"] = [dict(p) for p in peers]
        ingress.append(rule)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": {meta.APP_LABEL: name}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def exporter_enabled(s: spec.ClusterOperatorSpec) -> bool:
    chosen = s.exporter.network_policy.enabled
    return chosen if chosen is not None else s.exporter.service.type not in EXTERNAL


def objects(
    s: spec.ClusterOperatorSpec, component: Component, name: str, namespace: str, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The NetworkPolicy of ``component``'s workload ``name``: its port from its peers where it listens (none where
    the administrator turned that off), else one that admits nothing."""
    if component is Component.EXPORTER:
        if not exporter_enabled(s):
            return []
        peers = s.exporter.network_policy.allowed_from
        return [policy(name, namespace, labels, metric_names.EXPORTER_PORT, PROMETHEUS if peers is None else peers)]
    if component is Component.GPU_SCHEDULER:
        if s.gpu_scheduler.network_policy.enabled is False:
            return []
        return [policy(name, namespace, labels, extender.PORT, s.gpu_scheduler.network_policy.allowed_from or ())]
    return [policy(name, namespace, labels, None)]
