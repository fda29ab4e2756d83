"""The reconcile loop on the in-memory cluster (C1, R-DEP, R-MERGE, R-VF, R-VFIO, R-INSTALL).

Aspects: install (objects, tolerations, ConfigMaps, finalizer, Ready), zero writes in steady state, a
disabled prerequisite prunes its dependents and they come back, driver-config is never overwritten, an
object that is not ours is never touched, a hand edit of a field we own is put back, an invalid spec
changes nothing and reports field paths, a VF change recreates one node's gpu-device pod, the finalizer.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from harness import NS, ApiWrapper, Harness, cluster_operator, iter_events, wait_for

from metax_core.cluster import supporting, workloads
from metax_core.components import Component
from metax_core.node import vfio_config_map
from metax_core.spec.model import VfioConfigEntry
from metax_core.wire import meta
from metax_k8s.api import Api


def _install(h: Harness, spec: dict | None = None) -> None:
    h.objects.apply(cluster_operator(spec), field_manager="helm")
    h.start()
    wait_for("the first status", lambda: (h.cr().get("status") or {}).get("components"))


def test_install_applies_every_enabled_component_and_reports_ready(harness: Harness) -> None:
    _install(harness)
    assert harness.daemonsets() == {
        "metax-gpu-discovery",
        "metax-gpu-label",
        "metax-container-runtime",
        "metax-driver",
        "metax-maca",
        "metax-gpu-device",
        "metax-vfio-manager",
        "metax-topo-worker",
    }
    for name in harness.daemonsets():
        tolerations = harness.ds(name)["spec"]["template"]["spec"]["tolerations"]  # type: ignore[index]
        assert {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        } in tolerations
    driver = harness.ds("metax-driver")
    assert driver is not None and driver["spec"]["updateStrategy"] == {"type": "OnDelete"}
    cm = harness.objects.get("v1", "ConfigMap", "driver-config", NS)
    assert cm is not None and cm["data"]["node-vfnums"].strip() == "nodes: {}"
    assert harness.objects.get("v1", "ConfigMap", "metax-vfio-config", NS) is not None
    assert "metax-tech.com/cleanup" in harness.cr()["metadata"]["finalizers"]
    wait_for("Progressing", lambda: (harness.condition("Progressing") or {}).get("status") == "True")
    harness.mark_workloads_ready()
    wait_for("Ready=True", lambda: (harness.condition("Ready") or {}).get("status") == "True")
    status = harness.cr()["status"]
    assert status["observedGeneration"] == harness.cr()["metadata"]["generation"]
    names = [c["name"] for c in status["components"]]
    assert names[0] == "gpuLabel" and "exporter" in names
    exporter = next(c for c in status["components"] if c["name"] == "exporter")
    assert exporter["state"] == "Disabled" and not exporter["enabled"]
    assert list(iter_events(harness, "Applied"))


class ApplyRecordingApi(ApiWrapper):
    """The in-memory API, recording the kind of every object applied (not its status)."""

    def __init__(self, inner: Api) -> None:
        super().__init__(inner)
        self.applied: list[str] = []

    def apply(self, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if not options.get("subresource"):
            self.applied.append(str(body["kind"]))
        return self.inner.apply(body, **options)


def test_the_first_install_applies_every_workload_after_every_other_object() -> None:
    """Issue 26, P1: the first DaemonSet makes the API server busy; nothing else should queue behind it."""
    h = Harness(api=ApplyRecordingApi)
    recording = h.api
    assert isinstance(recording, ApplyRecordingApi)
    try:
        _install(h)
        kinds = recording.applied
        first = next(i for i, k in enumerate(kinds) if k in workloads.WORKLOAD_KINDS)
        assert {"ServiceAccount", "ClusterRole", "RoleBinding", "RuntimeClass"} <= set(kinds[:first])
        assert set(kinds[first:]) <= workloads.WORKLOAD_KINDS, kinds
        daemonsets = h.daemonsets()
        assert daemonsets and kinds[first:].count("DaemonSet") == len(daemonsets)
    finally:
        h.stop()


def test_steady_state_makes_no_writes(harness: Harness) -> None:
    _install(harness)
    harness.mark_workloads_ready()
    wait_for("Ready=True", lambda: (harness.condition("Ready") or {}).get("status") == "True")
    harness.settle()
    before = harness.writes()
    ready_since = harness.condition("Ready")["lastTransitionTime"]  # type: ignore[index]
    for _ in range(3):
        harness.settle()
    assert harness.writes() == before
    assert harness.condition("Ready")["lastTransitionTime"] == ready_since  # type: ignore[index]


def test_disabled_prerequisite_prunes_dependents_and_enabling_brings_them_back(harness: Harness) -> None:
    _install(harness)
    spec = cluster_operator()["spec"]
    spec["runtime"] = {"deploy": False}
    harness.objects.apply(cluster_operator(spec), field_manager="helm")
    wait_for("dependents pruned", lambda: "metax-gpu-device" not in harness.daemonsets())
    assert "metax-driver" not in harness.daemonsets() and "metax-maca" not in harness.daemonsets()
    assert "metax-gpu-label" in harness.daemonsets() and "metax-vfio-manager" in harness.daemonsets()
    degraded = wait_for(
        "Degraded", lambda: (c := harness.condition("Degraded")) and c["reason"] == "PrerequisiteDisabled" and c
    )
    assert "disabled prerequisite runtime" in degraded["message"]
    assert list(iter_events(harness, "Pruned"))
    assert harness.objects.get(supporting.RUNTIME_CLASS_API, "RuntimeClass", "metax") is None  # goes with runtime
    harness.objects.apply(cluster_operator(), field_manager="helm")
    wait_for("dependents back", lambda: "metax-gpu-device" in harness.daemonsets())
    wait_for("RuntimeClass back", lambda: harness.objects.get(supporting.RUNTIME_CLASS_API, "RuntimeClass", "metax"))


def test_the_runtime_class_metax_is_applied_with_the_runtime(harness: Harness) -> None:
    _install(harness)
    found = wait_for(
        "RuntimeClass metax", lambda: harness.objects.get(supporting.RUNTIME_CLASS_API, "RuntimeClass", "metax")
    )
    assert found["handler"] == "metax"
    assert found["scheduling"]["nodeSelector"] == {"metax-tech.com/gpu.installed": "true"}


OURS = "app.kubernetes.io/managed-by=metax-operator"
RBAC = "rbac.authorization.k8s.io/v1"
RBAC_KINDS = (
    ("v1", "ServiceAccount", NS),
    (RBAC, "Role", "default"),
    (RBAC, "RoleBinding", "default"),
    (RBAC, "ClusterRole", None),
    (RBAC, "ClusterRoleBinding", None),
)


def _rbac_of(h: Harness, component: str) -> list[str]:
    """``component``'s ServiceAccounts and RBAC objects that carry our label."""
    return sorted(
        f"{kind} {o['metadata']['name']}"
        for api_version, kind, ns in RBAC_KINDS
        for o in h.objects.list(
            api_version, kind, namespace=ns, label_selector=f"{OURS},metax-tech.com/component={component}"
        ).items
    )


def test_rbac_of_a_disabled_component_and_of_its_dependents_is_pruned_and_comes_back(harness: Harness) -> None:
    _install(harness)
    harness.settle()
    installed = {c: _rbac_of(harness, c) for c in ("runtime", "gpuDevice", "gpuLabel")}
    assert all(installed.values()), installed
    spec = cluster_operator()["spec"]
    spec["runtime"] = {"deploy": False}  # R-DEP: gpuDevice (and driver, maca) depend on it
    harness.objects.apply(cluster_operator(spec), field_manager="helm")
    wait_for("runtime's RBAC pruned", lambda: _rbac_of(harness, "runtime") == [])
    wait_for("gpuDevice's RBAC pruned with it", lambda: _rbac_of(harness, "gpuDevice") == [])
    assert _rbac_of(harness, "gpuLabel") == installed["gpuLabel"]  # still deployed: untouched
    pruned = [e["note"] for e in iter_events(harness, "Pruned")]
    assert any("ServiceAccount metax-gpu-device deleted: " in n and "runtime" in n for n in pruned), pruned
    harness.settle()
    before = harness.writes()
    for _ in range(3):
        harness.settle()
    assert harness.writes() == before  # pruned once; a component that stays disabled costs nothing
    harness.objects.apply(cluster_operator(), field_manager="helm")
    wait_for("the RBAC back", lambda: _rbac_of(harness, "gpuDevice") == installed["gpuDevice"])
    assert _rbac_of(harness, "runtime") == installed["runtime"]


class ReadCountingApi(ApiWrapper):
    """The in-memory API, counting single-object reads by kind."""

    def __init__(self, inner: Api) -> None:
        super().__init__(inner)
        self.gets: collections.Counter[str] = collections.Counter()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.gets[kind] += 1
        return self.inner.get(api_version, kind, name, namespace)


RBAC_KIND_NAMES = {kind for _, kind, _ in RBAC_KINDS}


def test_owned_rbac_is_watched_put_back_at_once_and_never_read_in_steady_state() -> None:
    h = Harness(api=ReadCountingApi)
    counting = h.api
    assert isinstance(counting, ReadCountingApi)
    try:
        _install(h)
        h.settle()
        installed = {c: _rbac_of(h, c) for c in ("gpuDevice", "gpuLabel")}
        reads = sum(counting.gets[k] for k in RBAC_KIND_NAMES)
        for _ in range(3):
            h.settle()
        assert sum(counting.gets[k] for k in RBAC_KIND_NAMES) == reads  # read from the watches' caches
        assert h.op.settings.resync_seconds >= 600  # so what follows is the watches' doing, not the resync
        h.objects.delete("v1", "ServiceAccount", "metax-gpu-device", NS)
        h.objects.delete(RBAC, "ClusterRoleBinding", "metax-operator:metax-gpu-device")
        h.objects.delete(RBAC, "RoleBinding", "metax-gpu-device-events", "default")
        wait_for("gpu-device's RBAC put back", lambda: _rbac_of(h, "gpuDevice") == installed["gpuDevice"])
        role = h.objects.get(RBAC, "ClusterRole", "metax-operator:metax-gpu-label")
        assert role is not None and role["rules"]
        h.objects.apply({**role, "rules": []}, field_manager="someone", force=True)
        wait_for(
            "gpu-label's ClusterRole rules put back",
            lambda: h.objects.get(RBAC, "ClusterRole", "metax-operator:metax-gpu-label")["rules"] == role["rules"],  # type: ignore[index]
        )
    finally:
        h.stop()


def test_the_rbac_prune_never_touches_an_object_that_is_not_ours(harness: Harness) -> None:
    _install(harness)
    harness.settle()
    spec = cluster_operator()["spec"]
    spec["maca"] = {"deploy": False}
    harness.objects.apply(cluster_operator(spec), field_manager="helm")
    wait_for("maca's RBAC pruned", lambda: _rbac_of(harness, "maca") == [])
    theirs = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "metax-maca", "namespace": NS}}
    harness.objects.apply(theirs, field_manager="someone")
    harness.op.reconciler.applier.forget()  # a new term looks again: the object is not ours, it stays
    harness.settle()
    assert harness.objects.get("v1", "ServiceAccount", "metax-maca", NS) is not None


def test_a_refusal_to_touch_an_object_that_is_not_ours_is_reported_once(harness: Harness, caplog) -> None:  # type: ignore[no-untyped-def]
    theirs = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "metax-maca", "namespace": NS}}
    harness.objects.apply(theirs, field_manager="someone")
    caplog.set_level(logging.DEBUG, logger="services.operator")
    _install(harness)
    wait_for("maca failed", lambda: (_component(harness, "maca") or {}).get("state") == "Failed")
    for _ in range(4):
        harness.settle()  # reconciles that each meet the same refusal
    refusals = [r for r in caplog.records if r.levelno >= logging.WARNING and "metax-maca exists without" in r.message]
    assert len(refusals) == 1, [r.message for r in refusals]
    assert [r.levelname for r in refusals] == ["WARNING"]
    events = list(iter_events(harness, "Refused"))
    assert len(events) == 1 and "ServiceAccount metax-operator/metax-maca" in events[0]["note"]
    assert (events[0].get("series") or {}).get("count", 1) == 1  # not re-emitted either
    assert events[0]["regarding"]["kind"] == "ServiceAccount" and events[0]["type"] == "Warning"
    harness.objects.delete("v1", "ServiceAccount", "metax-maca", NS)  # resolved: ours is created ...
    harness.settle()  # (ServiceAccounts are not watched: the next reconcile, here at once, creates it)
    wait_for("maca's account ours", lambda: _rbac_of(harness, "maca"))
    # ... and when someone takes it over, a new refusal is reported. One write (a forced apply of the label),
    # not a delete and a create: a reconcile running between those two would create ours again.
    takeover = {**theirs, "metadata": {**theirs["metadata"], "labels": {meta.MANAGED_BY_LABEL: "someone"}}}
    harness.objects.apply(takeover, field_manager="someone", force=True)
    # The operator reads its own objects from its informers: a reconcile that starts before the informer has
    # seen the takeover still finds the account ours and unchanged. The ordering the product gives is "the watch
    # event, then a reconcile" (the event wakes one); the test waits for the event as the operator sees it.
    wait_for(
        "the operator's cache sees the takeover",
        lambda: harness.op.reconciler.caches.lookup("ServiceAccount", "metax-maca", NS) is None,
    )
    harness.settle()
    refusals = [r for r in caplog.records if r.levelno >= logging.WARNING and "metax-maca exists without" in r.message]
    assert len(refusals) == 2


def _component(h: Harness, name: str) -> dict | None:
    return next((c for c in (h.cr().get("status") or {}).get("components", []) if c["name"] == name), None)


def test_driver_config_is_created_once_and_never_overwritten(harness: Harness) -> None:
    _install(harness)
    edited = {"node-vfnums": "nodes:\n  gpu-1:\n    vfnum: 4\n", "module-params": "", "node-module-params": ""}
    harness.objects.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "driver-config", "namespace": NS},
            "data": edited,
        },
        field_manager="kubectl",
        force=True,
    )
    harness.settle()
    cm = harness.objects.get("v1", "ConfigMap", "driver-config", NS)
    assert cm is not None and cm["data"]["node-vfnums"] == edited["node-vfnums"]


def test_vfio_config_follows_the_spec(harness: Harness) -> None:
    _install(harness)
    spec = cluster_operator()["spec"]
    spec["vfioManager"] = {"vfioConfig": [{"nodeName": "gpu-.*", "gpus": "0,1"}]}
    harness.objects.apply(cluster_operator(spec), field_manager="helm")

    def entries() -> tuple[VfioConfigEntry, ...]:
        cm = harness.objects.get("v1", "ConfigMap", vfio_config_map.NAME, NS) or {}
        return vfio_config_map.parse(cm.get("data")) if cm else ()

    # what the operator applied is what vfio-manager's own parser reads (issue 20: the keys once disagreed)
    assert wait_for("vfio config", entries) == (VfioConfigEntry("gpu-.*", "0,1"),)


def test_an_object_that_is_not_ours_is_never_touched(harness: Harness) -> None:
    foreign = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "metax-maca", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "theirs"}},
            "template": {
                "metadata": {"labels": {"app": "theirs"}},
                "spec": {"containers": [{"name": "x", "image": "theirs:1"}]},
            },
        },
    }
    harness.objects.apply(foreign, field_manager="someone")
    _install(harness)
    wait_for(
        "maca failed",
        lambda: any(
            c["name"] == "maca" and c["state"] == "Failed"
            for c in (harness.cr().get("status") or {}).get("components", [])
        ),
    )
    live = harness.ds("metax-maca")
    assert live is not None and live["spec"]["template"]["spec"]["containers"][0]["image"] == "theirs:1"
    assert harness.condition("Degraded")["reason"] == "ComponentFailed"  # type: ignore[index]


def test_a_hand_edit_of_an_owned_field_is_put_back(harness: Harness) -> None:
    _install(harness)
    harness.settle()
    edit = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "metax-maca", "namespace": NS},
        "spec": {"template": {"spec": {"nodeSelector": {workloads.GPU_NODE_LABEL: "nope"}}}},
    }
    harness.objects.apply(edit, field_manager="kubectl-edit", force=True)
    wait_for(
        "nodeSelector restored",
        lambda: (
            harness.ds("metax-maca")["spec"]["template"]["spec"]["nodeSelector"][workloads.GPU_NODE_LABEL] == "true"
        ),  # type: ignore[index]
    )


def test_a_deleted_daemonset_comes_back(harness: Harness) -> None:
    _install(harness)
    harness.settle()
    harness.objects.delete("apps/v1", "DaemonSet", "metax-gpu-label", NS)
    wait_for("gpu-label back", lambda: "metax-gpu-label" in harness.daemonsets())


def test_an_invalid_spec_changes_nothing_and_names_the_fields(harness: Harness) -> None:
    _install(harness)
    harness.settle()
    before = harness.ds("metax-driver")
    bad = cluster_operator()
    bad["spec"]["driver"]["payload"] = {}
    bad["spec"]["vfioManager"] = {"vfioConfig": [{"nodeName": "gpu-(", "gpus": "0"}]}
    harness.cluster.api.apply(bad, field_manager="helm", force=True)  # no webhook: the CRD schema admits it
    degraded = wait_for(
        "Degraded InvalidSpec", lambda: (c := harness.condition("Degraded")) and c["reason"] == "InvalidSpec" and c
    )
    assert (
        "driver.payload.version" in degraded["message"] and "vfioManager.vfioConfig[0].nodeName" in degraded["message"]
    )
    assert harness.condition("Ready")["reason"] == "InvalidSpec"  # type: ignore[index]
    assert harness.ds("metax-driver") == before


def _vfnums(h: Harness, text: str) -> None:
    h.objects.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "driver-config", "namespace": NS},
            "data": {"node-vfnums": text},
        },
        field_manager="kubectl",
        force=True,
    )


def test_a_vf_count_change_recreates_that_nodes_gpu_device_pod_only(harness: Harness) -> None:
    _install(harness)
    harness.pod("gpu-device-a", "gpu-1", Component.GPU_DEVICE.value)
    harness.pod("gpu-device-b", "gpu-2", Component.GPU_DEVICE.value)
    wait_for("VF counts recorded", lambda: (harness.cr().get("status") or {}).get("vfNums") == {"gpu-1": 0, "gpu-2": 0})
    _vfnums(harness, "nodes:\n  gpu-1:\n    vfnum: 4\n")
    wait_for("gpu-1's pod deleted", lambda: harness.objects.get("v1", "Pod", "gpu-device-a", NS) is None)
    assert harness.objects.get("v1", "Pod", "gpu-device-b", NS) is not None
    assert list(iter_events(harness, "VfCountChanged"))


def test_a_broken_driver_config_recreates_no_pod_and_keeps_the_recorded_counts(harness: Harness) -> None:
    """Without the webhook a broken edit reaches the API server; driver-manager keeps its last valid
    driver-config, so the operator must not restart the device plugins as if every node had no VFs (R-VF)."""
    _install(harness)
    # Ordered through the operator's own record, not the watches' arrival: gpu-1's pod is recorded at 0 VFs,
    # the edit to 4 recreates it (the round that deletes it records 4, the round that sees it gone records
    # nothing), and the pod the DaemonSet would start next is recorded at 4.
    harness.pod("gpu-device-0", "gpu-1", Component.GPU_DEVICE.value)
    wait_for("VF counts recorded", lambda: (harness.cr().get("status") or {}).get("vfNums") == {"gpu-1": 0})
    _vfnums(harness, "nodes:\n  gpu-1:\n    vfnum: 4\n")
    wait_for("gpu-1's pod deleted", lambda: harness.objects.get("v1", "Pod", "gpu-device-0", NS) is None)
    wait_for("no pod recorded", lambda: (harness.cr().get("status") or {}).get("vfNums") == {})
    harness.pod("gpu-device-a", "gpu-1", Component.GPU_DEVICE.value)
    wait_for("VF counts recorded", lambda: (harness.cr().get("status") or {}).get("vfNums") == {"gpu-1": 4})
    events_before = len(list(iter_events(harness, "VfCountChanged")))
    _vfnums(harness, "nodes: [broken")
    harness.pod("gpu-device-b", "gpu-2", Component.GPU_DEVICE.value)  # a change that makes the operator look again
    harness.settle()
    assert harness.objects.get("v1", "Pod", "gpu-device-a", NS) is not None
    # gpu-2 is recorded at 0 or not at all, as the operator saw its pod before or after the broken edit
    assert (harness.cr().get("status") or {}).get("vfNums", {}).get("gpu-1") == 4
    assert len(list(iter_events(harness, "VfCountChanged"))) == events_before


def test_deleting_the_cluster_operator_removes_everything_it_created(harness: Harness) -> None:
    harness.cluster.node_metadata.patch_node_metadata(
        "gpu-1",
        labels={"metax-tech.com/gpu.product": "C500", "metax-tech.com/gpu-device.mode": "sgpu", "team": "a"},
        annotations={"metax-tech.com/gpu-vfio": '{"0":1}'},
    )
    _install(harness)
    harness.settle()
    ours = "app.kubernetes.io/managed-by=metax-operator"
    rbac_kinds = [
        ("v1", "ServiceAccount", NS),
        ("rbac.authorization.k8s.io/v1", "Role", NS),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "default"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", None),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None),
    ]

    def rbac_left() -> list[str]:
        return [
            f"{kind} {o['metadata']['name']}"
            for api_version, kind, ns in rbac_kinds
            for o in harness.objects.list(api_version, kind, namespace=ns, label_selector=ours).items
        ]

    assert len(rbac_left()) >= len(rbac_kinds)  # the component RBAC was applied (R-SECURITY) ...
    harness.objects.delete("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator")
    wait_for(
        "cluster-operator gone",
        lambda: harness.objects.get("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator") is None,
    )
    assert harness.daemonsets() == set()
    assert rbac_left() == []  # ... and goes with the rest
    assert harness.objects.get(supporting.RUNTIME_CLASS_API, "RuntimeClass", "metax") is None
    assert (
        harness.objects.list(
            "v1", "ConfigMap", namespace=NS, label_selector="app.kubernetes.io/managed-by=metax-operator"
        ).items
        == []
    )
    node = harness.objects.get("v1", "Node", "gpu-1")
    assert node is not None
    labels = node["metadata"]["labels"]
    assert "metax-tech.com/gpu.product" not in labels and labels["team"] == "a"
    assert labels["metax-tech.com/gpu-device.mode"] == "sgpu"  # the administrator's own label stays
    assert "metax-tech.com/gpu-vfio" not in (node["metadata"].get("annotations") or {})
