"""The operator on the real control plane: a watch that expires (410 Gone), RBAC of disabled components.

Aspects:
- watch expired: kube-apiserver restarts while the operator watches; its watch cache starts again at the
  current etcd revision, so every watch the operator resumes from an older resourceVersion gets 410 Gone
  ("too old resource version"); the operator relists and goes on reconciling: an edit made across the
  expiry is applied, and the watches work again after it (a later edit is applied too);
- R-DEP / R-SECURITY: disabling a prerequisite prunes the ServiceAccounts, Roles, RoleBindings, ClusterRoles
  and ClusterRoleBindings of it and of its dependents, never an object that is not ours, and re-enabling it
  brings them back; the refusal to touch an object that is not ours is logged once, not on every reconcile.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core.errors import ClusterError
from metax_dev.controlplane import cluster as controlplane

pytestmark = pytest.mark.integration

_RBAC = "rbac.authorization.k8s.io/v1"
OURS = "app.kubernetes.io/managed-by=metax-operator"
RBAC_KINDS = (
    ("v1", "ServiceAccount", NS),
    (_RBAC, "Role", "default"),
    (_RBAC, "RoleBinding", "default"),
    (_RBAC, "ClusterRole", None),
    (_RBAC, "ClusterRoleBinding", None),
)


def _ready(env: Env) -> bool:
    c = env.condition("Ready")
    return c is not None and c["status"] == "True"


def _operator_log(env: Env) -> str:
    return "".join(p.log_path.read_text(errors="replace") for p in env.processes)


@pytest.mark.restarts_apiserver
def test_a_watch_expired_by_the_api_server_relists_and_an_edit_across_it_is_applied(
    operator_env: Env, control_plane: controlplane.ControlPlane
) -> None:
    env = operator_env
    spec = cluster_operator()["spec"]
    env.api.apply(cluster_operator(spec), field_manager="helm")
    env.start_operator()
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    assert "too old resource version" not in _operator_log(env)
    # Writes the operator does not watch move etcd's revision past every resourceVersion its watches hold.
    scratch = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "revision-bump", "namespace": "default"}}
    for i in range(20):
        env.api.apply({**scratch, "data": {"i": str(i)}}, field_manager="operator-tests", force=True)
    control_plane.restart_apiserver()
    spec["vfioManager"] = {"deploy": False}  # the edit across the expiry
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("vfio-manager pruned after the 410", lambda: "metax-vfio-manager" not in env.daemonsets(), timeout=120)
    wait_for("a 410 seen and relisted", lambda: "too old resource version" in _operator_log(env), timeout=30)
    gone = [line for line in _operator_log(env).splitlines() if "too old resource version" in line]
    assert any("relisting" in line for line in gone), gone
    spec["vfioManager"] = {"deploy": True}  # the watches work after the relist
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("vfio-manager back", lambda: env.ds("metax-vfio-manager") is not None, timeout=60)
    env.api.delete("v1", "ConfigMap", "revision-bump", "default")
    assert all(p.alive() for p in env.processes)
    control_plane.restart_controllers()  # the teardown's garbage collector and the next test see changes at once


def _rbac_of(env: Env, component: str) -> list[str]:
    selector = f"{OURS},metax-tech.com/component={component}"
    return sorted(
        f"{kind} {o['metadata']['name']}"
        for api_version, kind, ns in RBAC_KINDS
        for o in env.api.list(api_version, kind, namespace=ns, label_selector=selector).items
    )


def _get(env: Env, api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    try:
        return env.api.get(api_version, kind, name, namespace)
    except ClusterError:
        return None


def test_the_rbac_of_a_disabled_prerequisite_and_its_dependents_is_pruned_and_comes_back(operator_env: Env) -> None:
    env = operator_env
    spec = cluster_operator()["spec"]
    env.api.apply(cluster_operator(spec), field_manager="helm")
    env.start_operator()
    wait_for("Ready=True", lambda: _ready(env), timeout=120)
    installed = {c: _rbac_of(env, c) for c in ("runtime", "gpuDevice", "maca", "gpuLabel")}
    assert "ClusterRoleBinding metax-operator:metax-gpu-device" in installed["gpuDevice"], installed
    # Not ours: a Role with the name of maca's events Role, without our label (someone else's object).
    env.api.delete(_RBAC, "Role", "metax-maca-events", "default")
    theirs = {"apiVersion": _RBAC, "kind": "Role", "metadata": {"name": "metax-maca-events", "namespace": "default"}}
    env.api.apply({**theirs, "rules": []}, field_manager="someone")
    spec["runtime"] = {"deploy": False}  # R-DEP: driver, maca and gpuDevice depend on it
    env.api.apply(cluster_operator(spec), field_manager="helm")
    for component in ("runtime", "gpuDevice", "maca"):
        wait_for(f"{component}'s RBAC pruned", lambda c=component: _rbac_of(env, c) == [], timeout=60)  # type: ignore[misc]
    assert _rbac_of(env, "gpuLabel") == installed["gpuLabel"]  # still deployed: untouched
    assert _get(env, _RBAC, "Role", "metax-maca-events", "default") is not None  # not ours: left alone
    spec["runtime"] = {"deploy": True}
    env.api.apply(cluster_operator(spec), field_manager="helm")
    wait_for("runtime's RBAC back", lambda: _rbac_of(env, "runtime") == installed["runtime"], timeout=60)
    wait_for("gpuDevice's RBAC back", lambda: _rbac_of(env, "gpuDevice") == installed["gpuDevice"], timeout=60)
    maca = wait_for(
        "maca refused (its events Role is not ours)",
        lambda: next(
            (c for c in env.cr()["status"]["components"] if c["name"] == "maca" and c["state"] == "Failed"), None
        ),
        timeout=60,
    )
    assert "Role default/metax-maca-events exists without label" in maca["message"]
    for interval in (7, 8):  # reconciles that meet the same refusal (each one writes observedGeneration)
        spec["gpuDevice"] = {"healthyInterval": interval}
        env.api.apply(cluster_operator(spec), field_manager="helm")
        wait_for("the operator reconciled the edit", lambda: _seen_latest(env), timeout=60)
    refusals = [line for line in _operator_log(env).splitlines() if "metax-maca-events exists without" in line]
    assert len(refusals) == 1, refusals
    env.api.delete(_RBAC, "Role", "metax-maca-events", "default")


def _seen_latest(env: Env) -> bool:
    cr = env.cr()
    return (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]
