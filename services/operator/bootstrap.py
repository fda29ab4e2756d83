"""The composition root of the operator: adapters from `Settings`, wired into an `run.Operator`.

Tests pass an `Api` (the in-memory server or an `HttpApi` on the test control plane) and a clock; production
builds the HTTP client from the kubeconfig or the in-cluster configuration. Nothing is built at import time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from metax_core.cluster import gpu_nodes, network_policies, rbac, render_settings, supporting, wakes
from metax_core.dra import classes as dra_classes
from metax_core.ports.cluster import RawObject
from metax_core.wire import meta
from metax_k8s import client, connect, cordon, events, lease, nodes, objects
from metax_k8s.api import Api
from services.operator import cached_fields, informers, leader, reconciler, run, settings
from services.operator.caches import Caches, component_of, health_of
from services.operator.workqueue import WorkQueue


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


LIST_CHUNK = 100
"""Objects per list page for the operator: its informers slim each page before the next (issue 11, P3), so a
smaller page than the client's default keeps the peak of a restart at 1,000 nodes (7,000 pods) low."""


def production_api(s: settings.Settings) -> Api:
    return client.HttpApi(connect.connect(s.kubeconfig), user_agent="metax-operator-controller", list_chunk=LIST_CHUNK)


def bootstrap(
    s: settings.Settings | None = None,
    *,
    api: Api | None = None,
    clock: Callable[[], dt.datetime] = _utc_now,
    watch_seconds: int = 300,
) -> run.Operator:
    s = s or settings.from_env()
    api = api or production_api(s)
    objs = objects.K8sObjects(api)
    queue = WorkQueue(base=s.backoff_base, cap=s.backoff_max)
    key = run.KEY
    pace = run.Pace(s.progress_pace)

    def wake(old: RawObject | None, new: RawObject | None) -> None:
        if wakes.progress_only(old, new):
            queue.add_after(key, pace.delay())  # bursts of progress coalesce into one reconcile per pace
        else:
            queue.add(key)

    def pod_changed(old: RawObject | None, new: RawObject | None) -> None:
        queue.add_after(key, pace.delay())  # the operator owns no pod: every pod change is progress

    def node_changed(old: RawObject | None, new: RawObject | None) -> None:
        if wakes.node_matters(old, new):  # not a heartbeat
            queue.add(key)

    ns = s.namespace
    owned = meta.MANAGED_SELECTOR

    def owned_informer(api_version: str, kind: str, namespace: str | None) -> informers.Informer:
        return informers.Informer(
            objs,
            api_version,
            kind,
            namespace=namespace,
            label_selector=owned,
            on_change=wake,
            watch_seconds=watch_seconds,
        )

    # The components' RBAC (metax_core.cluster.rbac): in the operator's namespace, in the events namespace, and
    # cluster-wide; watched so that one deleted or edited by hand is put back at once, not at the next resync.
    rbac_informers = tuple(
        owned_informer(api_version, kind, namespace) for api_version, kind, namespace in rbac.locations(ns)
    )
    caches = Caches(
        cluster_operator=informers.Informer(
            objs, reconciler.CR_API, "ClusterOperator", on_change=wake, watch_seconds=watch_seconds
        ),
        configmaps=informers.Informer(
            objs, "v1", "ConfigMap", namespace=ns, on_change=wake, watch_seconds=watch_seconds
        ),
        nodes=informers.Informer(
            objs,
            "v1",
            "Node",
            slim=informers.slim_node,
            on_change=node_changed,
            watch_seconds=watch_seconds,
            index_by=health_of,
            fields=cached_fields.NodeFields,
        ),
        daemonsets=owned_informer("apps/v1", "DaemonSet", ns),
        deployments=owned_informer("apps/v1", "Deployment", ns),
        services=owned_informer("v1", "Service", ns),
        network_policies=owned_informer(network_policies.API_VERSION, network_policies.KIND, ns),
        runtime_classes=owned_informer(supporting.RUNTIME_CLASS_API, "RuntimeClass", None),
        # R-DRA's DeviceClasses; on a cluster without resource.k8s.io/v1 the informer stays empty and quiet.
        device_classes=owned_informer(dra_classes.API_VERSION, dra_classes.KIND, None),
        pods=informers.Informer(
            objs,
            "v1",
            "Pod",
            namespace=ns,
            label_selector=meta.PART_OF_SELECTOR,
            slim=informers.slim_pod,
            on_change=pod_changed,
            watch_seconds=watch_seconds,
            index_by=component_of,
            tally_by=gpu_nodes.readiness_on_node,
            fields=cached_fields.PodFields,
        ),
        # The Prometheus Operator's CRD, by name: installing it makes the exporter's ServiceMonitor due at once.
        service_monitor_crd=informers.Informer(
            objs,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            field_selector=f"metadata.name={render_settings.SERVICE_MONITOR_CRD}",
            slim=lambda o: {"metadata": o.get("metadata") or {}, "status": o.get("status") or {}},
            on_change=wake,
            watch_seconds=watch_seconds,
        ),
        rbac=rbac_informers,
    )
    # Recorded by a thread of their own: a reconcile hands each Event over and goes on (issue 26, P1).
    ev = events.BackgroundEvents(
        events.K8sEvents(api, reporting_controller="metax-operator", reporting_instance=s.identity, clock=clock)
    )
    rec = reconciler.Reconciler(
        s,
        objects=objs,
        cordons=cordon.Cordons(objs.api, field_manager=s.field_manager),
        events=ev,
        nodes=nodes.K8sNodeMetadata(api, field_manager=s.field_manager),
        caches=caches,
        clock=clock,
    )
    lock = lease.K8sLeaseLock(api, name=s.lease_name, namespace=ns, identity=s.identity) if s.leader_election else None

    def new_term() -> None:
        rec.applier.forget()
        queue.add(key)

    leadership = leader.Leadership(lock, on_started=new_term)
    return run.Operator(s, reconciler=rec, caches=caches, queue=queue, leadership=leadership, events=ev, pace=pace)
