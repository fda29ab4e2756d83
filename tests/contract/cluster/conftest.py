"""The cluster contract suite's one fixture: ``cluster`` (function, parametrized), a
``tests.support.cluster.Cluster`` with a fresh namespace, ``[inmemory]`` (always) and ``[real]`` (marked
``integration``, on the session's test control plane from ``tests.support.control_plane``): every contract
test runs against both adapters of the cluster port, beside the hardware port's contract (tests/contract/hardware).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from metax_core.errors import ClusterError
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client as metax_client
from metax_k8s.api import Api
from metax_k8s.inmemory import InMemoryApiServer
from tests.support.cluster import WIDGET_CRD, Cluster, FaultProxy, new_namespace


@pytest.fixture(params=["inmemory", pytest.param("real", marks=pytest.mark.integration)])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    proxies: list[FaultProxy] = []
    if request.param == "inmemory":
        server = InMemoryApiServer()
        server.apply(WIDGET_CRD, field_manager="contract-tests", force=True)
        result = Cluster(
            "inmemory",
            server,
            new_namespace(server),
            restart=server.restart,
            compact=server.compact,
            faulty=lambda: (server, server),
        )
    else:
        control_plane: controlplane.ControlPlane = request.getfixturevalue("control_plane")
        api: metax_client.HttpApi = request.getfixturevalue("real_api")

        def faulty() -> tuple[Api, FaultProxy]:
            proxy = FaultProxy(api.client)
            proxies.append(proxy)
            return proxy.api(), proxy

        result = Cluster(
            "real",
            api,
            new_namespace(api),
            restart=control_plane.restart_apiserver,
            # The watch cache forgets its history when kube-apiserver restarts (etcd compaction alone does
            # not expire versions the cache still serves), so that is how versions expire for real.
            compact=control_plane.restart_apiserver,
            faulty=faulty,
        )
    yield result
    for cleanup in result.cleanups:
        cleanup()
    for proxy in proxies:
        proxy.close()
    with contextlib.suppress(ClusterError):
        result.api.delete("v1", "Namespace", result.namespace)
