"""The operator brings its CRD to its own release before it reconciles (metax_k8s.crd.sync, R-UPGRADE).

On the in-memory cluster, whose API server serves a CRD's schema as the real one does (pruning, defaults,
Established at once). Aspects: an older release's CRD (as Helm leaves it after ``helm upgrade``) is applied over
and reported in ``status.versions``, once per start and not again when nothing changed; a newer release's CRD (after
``helm rollback``) is kept, and a spec using its new fields is refused naming them; a CRD the operator may not patch
leaves everything unreconciled with Degraded CRDOutdated and a Warning Event, until the patch is allowed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harness import ApiWrapper, Harness, cluster_operator, iter_events, wait_for

from metax_core import release
from metax_core.cluster import crd_policy
from metax_core.errors import ClusterError
from metax_core.wire import event_reasons
from metax_k8s import crd
from metax_k8s.api import Api
from metax_k8s.inmemory import InMemoryCluster
from services.operator import reconciler

CRD_API = "apiextensions.k8s.io/v1"


def _crd_of(release_name: str, *, status_versions: bool = True, future_field: bool = False) -> dict[str, Any]:
    """This build's CRD as another release would have it: its annotation, with or without a field."""
    body = copy.deepcopy(crd.crd())
    body["metadata"]["annotations"][crd_policy.ANNOTATION] = release_name
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    if not status_versions:
        del schema["status"]["properties"]["versions"]
    if future_field:
        schema["spec"]["properties"]["futureField"] = {"type": "string", "description": "added by a newer release"}
    return body


def _cluster(served: dict[str, Any]) -> InMemoryCluster:
    cluster = Harness().cluster  # the default cluster: nodes, namespace, this build's CRD
    cluster.api.apply(served, field_manager="helm", force=True)
    return cluster


def _live_crd(h: Harness) -> dict[str, Any]:
    found = h.objects.get(CRD_API, "CustomResourceDefinition", crd.NAME)
    assert found is not None
    return dict(found)


class CountingCrdWrites(ApiWrapper):
    def __init__(self, inner: Api, refuse: bool = False) -> None:
        super().__init__(inner)
        self.crd_writes = 0
        self.refuse = refuse

    def apply(self, obj: Any, **kw: Any) -> Any:
        if obj.get("kind") == "CustomResourceDefinition":
            self.crd_writes += 1
            if self.refuse:
                raise ClusterError(
                    "apply", f"CustomResourceDefinition {crd.NAME}", "forbidden: User cannot patch resource", 403
                )
        return self.inner.apply(obj, **kw)


def test_the_crd_annotation_the_generator_writes_is_what_the_operator_reads() -> None:
    assert crd_policy.release_of(crd.crd()) == release.running()


def test_an_older_release_crd_is_upgraded_at_start_and_the_new_status_field_is_served() -> None:
    mine = release.running()
    cluster = _cluster(_crd_of("0.0.1", status_versions=False))
    cluster.api.apply(cluster_operator(), field_manager="helm")
    wrappers: list[CountingCrdWrites] = []
    h = Harness(cluster=cluster, api=lambda a: wrappers.append(CountingCrdWrites(a)) or wrappers[-1]).start()
    try:
        # status.versions is pruned by the old schema: stored, it proves the new one is served
        wait_for("status.versions", lambda: (h.cr().get("status") or {}).get("versions"))
        assert h.cr()["status"]["versions"] == {"operator": mine, "crd": mine}
        assert crd_policy.release_of(_live_crd(h)) == mine
        upgraded = list(iter_events(h, event_reasons.CRD_UPGRADED))
        assert len(upgraded) == 1 and mine in upgraded[0]["note"]
        assert wrappers[0].crd_writes == 1
    finally:
        h.stop()
    again = Harness(cluster=cluster, api=lambda a: wrappers.append(CountingCrdWrites(a)) or wrappers[-1]).start()
    try:
        again.settle()
        assert wrappers[1].crd_writes == 0  # the same release, Established: quiet
    finally:
        again.stop()


def test_a_newer_release_crd_is_kept_and_its_fields_are_refused_by_name() -> None:
    cluster = _cluster(_crd_of("99.0.0", future_field=True))
    spec = {**cluster_operator()["spec"], "futureField": "on"}
    cluster.api.apply(cluster_operator(spec), field_manager="helm")
    h = Harness(cluster=cluster).start()
    try:
        degraded = wait_for(
            "Degraded", lambda: (c := h.condition("Degraded")) and c["status"] == "True" and c["reason"] and c
        )
        assert degraded["reason"] == "InvalidSpec"
        assert "futureField: unknown field" in degraded["message"] and "99.0.0" in degraded["message"]
        assert h.cr()["status"]["phase"] == "Invalid"
        assert crd_policy.release_of(_live_crd(h)) == "99.0.0"  # never downgraded
        assert (
            "futureField"
            in _live_crd(h)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        )
        assert h.daemonsets() == set()  # nothing applied
        assert h.cr()["spec"]["futureField"] == "on"  # and nothing pruned
    finally:
        h.stop()


def test_a_crd_the_operator_may_not_patch_stops_the_reconcile_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconciler, "CRD_RECHECK", 0.1)
    cluster = _cluster(_crd_of("0.0.1"))
    cluster.api.apply(cluster_operator(), field_manager="helm")
    wrappers: list[CountingCrdWrites] = []
    h = Harness(
        cluster=cluster, api=lambda a: wrappers.append(CountingCrdWrites(a, refuse=True)) or wrappers[-1]
    ).start()
    try:
        degraded = wait_for(
            "CRDOutdated", lambda: (c := h.condition("Degraded")) and c["reason"] == "CRDOutdated" and c
        )
        assert "0.0.1" in degraded["message"] and "forbidden" in degraded["message"]
        assert h.condition("Ready")["reason"] == "CRDOutdated"  # type: ignore[index]
        assert h.daemonsets() == set()
        warnings = list(iter_events(h, event_reasons.CRD_OUTDATED))
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        wrappers[0].refuse = False  # the administrator fixed the ClusterRole
        wait_for("installed", lambda: "metax-driver" in h.daemonsets())
        assert crd_policy.release_of(_live_crd(h)) == release.running()
    finally:
        h.stop()
