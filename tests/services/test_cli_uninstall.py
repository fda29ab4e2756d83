"""`metax-operator uninstall` (the chart's pre-delete hook): delete cluster-operator, wait for the cleanup.

Covers: nothing to do when it does not exist; returns once the finalizer is gone; times out naming the
pending finalizers (so `helm uninstall` stops with a reason) when no operator removes it.
"""

from __future__ import annotations

import pytest

from metax_core.spec import model as spec
from metax_k8s import crd
from metax_k8s.inmemory import InMemoryApiServer
from services.cli import uninstall

FINALIZER = "gpu.metax-tech.com/cleanup"


@pytest.fixture
def api() -> InMemoryApiServer:
    server = InMemoryApiServer()
    server.apply(crd.crd(), field_manager="test", force=True)
    return server


def _create(api: InMemoryApiServer) -> None:
    api.create(
        {
            "apiVersion": uninstall.API_VERSION,
            "kind": spec.KIND,
            "metadata": {"name": spec.OBJECT_NAME, "finalizers": [FINALIZER]},
            "spec": {},
        }
    )


def test_nothing_to_clean_up_when_it_does_not_exist(api: InMemoryApiServer) -> None:
    assert "does not exist" in uninstall.delete_and_wait(api, 10)


def test_returns_once_the_operator_removed_its_finalizer(api: InMemoryApiServer) -> None:
    _create(api)
    sleeps: list[float] = []

    def operator_finishes(seconds: float) -> None:
        sleeps.append(seconds)
        api.merge_patch(uninstall.API_VERSION, spec.KIND, spec.OBJECT_NAME, {"metadata": {"finalizers": None}})

    assert "cleanup has finished" in uninstall.delete_and_wait(api, 60, sleep=operator_finishes)
    assert sleeps == [2.0]


def test_times_out_naming_the_pending_finalizers(api: InMemoryApiServer) -> None:
    _create(api)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(uninstall.CleanupTimeout, match=f"finalizers pending: {FINALIZER}.*operator running"):
        uninstall.delete_and_wait(api, 10, clock=lambda: now[0], sleep=sleep)
    assert now[0] >= 10
