"""An operator on the in-memory cluster, and a stand-in for the DaemonSet controller's status writes."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from metax_core.cluster import workloads
from metax_k8s.api import Api
from metax_k8s.inmemory import InMemoryCluster
from services.operator import bootstrap, run, settings
from tests import waiting

wait_for = functools.partial(waiting.wait_for, timeout=20.0, interval=0.02)
"""The one wait_for (tests/waiting.py), polling fast: the in-memory API server answers at once."""

NS = "metax-operator"
CR_API = "gpu.metax-tech.com/v1alpha1"


def cluster_operator(spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body = {"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.14.6"}}}
    if spec is not None:
        body = copy.deepcopy(dict(spec))
    return {"apiVersion": CR_API, "kind": "ClusterOperator", "metadata": {"name": "cluster-operator"}, "spec": body}


class ApiWrapper:
    """The cluster's API as the operator sees it through a test: every call passes through to ``inner`` except
    the ones a subclass defines (to count, record or slow them down). Give the subclass to `Harness` as ``api``."""

    def __init__(self, inner: Api) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Harness:
    def __init__(
        self,
        *,
        identity: str = "op-a",
        leader_election: bool = False,
        cluster: InMemoryCluster | None = None,
        api: Callable[[Api], Api] | None = None,
        uninstall_timeout: float = 180.0,
    ):
        """``api`` wraps the cluster's API for the operator (to count its requests)."""
        self.cluster = cluster or InMemoryCluster()
        if cluster is None:
            self.cluster.install_crd()
            self.cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            self.cluster.add_node("gpu-1", labels={workloads.GPU_NODE_LABEL: "true"})
            self.cluster.add_node("gpu-2", labels={workloads.GPU_NODE_LABEL: "true"})
            self.cluster.add_node("cpu-1")
        self.settings = settings.Settings(
            identity=identity, leader_election=leader_election, backoff_base=0.05, uninstall_timeout=uninstall_timeout
        )
        self.api = self.cluster.api if api is None else api(self.cluster.api)
        self.op: run.Operator = bootstrap.bootstrap(self.settings, api=self.api, watch_seconds=5)

    def start(self) -> Harness:
        self.op.start()
        return self

    def stop(self) -> None:
        self.op.stop()

    @property
    def objects(self) -> Any:
        return self.cluster.objects

    def cr(self) -> dict[str, Any]:
        found = self.objects.get(CR_API, "ClusterOperator", "cluster-operator")
        assert found is not None
        return dict(found)

    def condition(self, kind: str) -> dict[str, Any] | None:
        for c in (self.cr().get("status") or {}).get("conditions") or []:
            if c["type"] == kind:
                return dict(c)
        return None

    def ds(self, name: str) -> dict[str, Any] | None:
        found = self.objects.get("apps/v1", "DaemonSet", name, NS)
        return None if found is None else dict(found)

    def daemonsets(self) -> set[str]:
        return {o["metadata"]["name"] for o in self.objects.list("apps/v1", "DaemonSet", namespace=NS).items}

    def writes(self) -> int:
        """Every write the operator made so far (its one counter, `services.operator.writes`)."""
        return self.op.reconciler.tally.total

    def settle(self) -> None:
        """Wait until a reconcile that started after this call has finished.

        Counting started reconciles was not enough: one already running when the test changed something
        counted, and the test went on while it still acted on the old state (a refusal test saw its
        ServiceAccount re-created by a reconcile in flight)."""
        target = self.op.reconciles + 1  # the next one to start, after every one started so far
        self.op.queue.add(run.KEY)
        wait_for("a reconcile", lambda: self.op.completed >= target)

    def mark_workloads_ready(self) -> None:
        """What the DaemonSet/Deployment controllers report once every pod is ready (all GPU nodes)."""
        gpu = sum(
            1
            for n in self.objects.list("v1", "Node").items
            if (n["metadata"].get("labels") or {}).get(workloads.GPU_NODE_LABEL) == "true"
        )
        every = len(self.objects.list("v1", "Node").items)
        for kind in ("DaemonSet", "Deployment"):
            for obj in self.objects.list("apps/v1", kind, namespace=NS).items:
                gen = obj["metadata"].get("generation", 1)
                if kind == "DaemonSet":
                    want = gpu if obj["spec"]["template"]["spec"].get("nodeSelector") else every
                    st = {"desiredNumberScheduled": want, "numberReady": want, "updatedNumberScheduled": want}
                else:
                    st = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
                body = {
                    "apiVersion": "apps/v1",
                    "kind": kind,
                    "metadata": {"name": obj["metadata"]["name"], "namespace": NS},
                    "status": {**st, "observedGeneration": gen},
                }
                self.objects.apply_status(body, field_manager="kube-controller-manager", force=True)

    def pod(self, name: str, node: str, component: str, *, annotations: Mapping[str, str] | None = None) -> None:
        labels = {
            workloads.COMPONENT_LABEL: component,
            workloads.PART_OF_LABEL: "metax-gpu-operator",
            workloads.APP_LABEL: f"metax-{component}",
        }
        self.cluster.api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": dict(annotations or {})},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            }
        )


def iter_events(h: Harness, reason: str) -> Iterator[dict[str, Any]]:
    """The operator's Events with ``reason``, once every one it handed over so far is recorded."""
    assert h.op.events.flush(10.0), "the operator's Events were not recorded within 10 s"
    for ns in (NS, "default"):
        for e in h.objects.list("events.k8s.io/v1", "Event", namespace=ns).items:
            if e.get("reason") == reason:
                yield dict(e)
