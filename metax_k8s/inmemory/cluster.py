"""The in-memory cluster adapter: every cluster port, wired to one in-memory API server.

Why: the demo and the fast tests need a cluster that behaves like the real one without starting one. The
ports are the production classes (`objects.K8sObjects`, `nodes.K8sNodeMetadata`, `events.K8sEvents`,
`lease.K8sLeaseLock`); only the server underneath is in memory (`inmemory_server.InMemoryApiServer`, see
its docstring for what it models). tests/contract/cluster/test_cluster_contract_*.py runs the same suite against
this and against a real kube-apiserver.

    cluster = InMemoryCluster()
    cluster.install_crd()
    cluster.objects.apply(cluster_operator, field_manager="helm")
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from metax_k8s import crd, events, lease, nodes, objects, retry
from metax_k8s.inmemory.server import InMemoryApiServer


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class InMemoryCluster:
    """An in-memory cluster with every cluster port wired to one `InMemoryApiServer`.

    ``clock`` (wall time: timestamps, event windows) and ``monotonic`` (lease expiry) are injectable so tests
    and the demo can move time by hand.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], dt.datetime] = _utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        policy: retry.RetryPolicy | None = None,
    ) -> None:
        self.clock = clock
        self.monotonic = monotonic
        self.policy = policy
        self.api = InMemoryApiServer(clock=clock)
        self.objects = objects.K8sObjects(self.api, policy=policy)
        self.node_metadata = nodes.K8sNodeMetadata(self.api, policy=policy)

    def events(self, *, reporting_controller: str, reporting_instance: str, **options: Any) -> events.K8sEvents:
        """A `events.K8sEvents` on this cluster's clock."""
        return events.K8sEvents(
            self.api,
            reporting_controller=reporting_controller,
            reporting_instance=reporting_instance,
            clock=self.clock,
            policy=self.policy,
            **options,
        )

    def leader_lock(self, *, name: str, namespace: str, identity: str, **options: Any) -> lease.K8sLeaseLock:
        """A `lease.K8sLeaseLock` on this cluster's monotonic clock."""
        return lease.K8sLeaseLock(
            self.api,
            name=name,
            namespace=namespace,
            identity=identity,
            monotonic=self.monotonic,
            wall_clock=self.clock,
            policy=self.policy,
            **options,
        )

    def add_node(self, name: str, *, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Register a Node (what a kubelet does when it joins)."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}}
        return self.api.create(body, field_manager="kubelet")

    def install_crd(self) -> dict[str, Any]:
        """Serve the ClusterOperator kind (what the chart's crds/ directory does)."""
        return self.api.apply(crd.crd(), field_manager="helm", force=True)
