"""The cluster port contract for objects: apply, get, list, status and schema admission.

Every test runs twice: ``[inmemory]`` on every test run, ``[real]`` (marked ``integration``) against the
test control plane's kube-apiserver through `client.HttpApi` (the ``cluster`` fixture in conftest.py). Where
the two differ, the in-memory server is wrong. Aspects covered:

- server-side apply: ownership per field manager, conflicts without force, force, removal of fields a
  manager stops applying, no-op applies, dry runs, finalizers, the status subresource and
  metadata.generation;
- a finalizer list set by `Objects.set_finalizers` only on the resourceVersion it was decided on (Conflict
  otherwise), releasing a deleted object, NotFound once it is gone;
- errors: NotFound, AlreadyExists, stale resourceVersion, unknown kinds, missing namespaces, and (once,
  without a cluster) an unloadable kubeconfig;
- schema admission of a custom kind: enum, int-or-string, unknown fields (strict), defaults;
- label selectors (equality and set-based) and field selectors (metadata.name, spec.nodeName);
- a list with a transform keeps what the transform returns for each object (None drops it), across pages.
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.errors import ClusterError, Conflict, NotFound
from metax_core.spec import converter
from metax_core.spec import model as spec
from metax_k8s import client, crd, retry
from tests.support.cluster import WIDGET_API, Cluster, WatchCollector, named, wait_served

CO_API = f"{spec.API_GROUP}/{spec.API_VERSION}"


def widget(
    cluster: Cluster, name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": WIDGET_API,
        "kind": "Widget",
        "metadata": {"name": name, "namespace": cluster.namespace},
    }
    if spec is not None:
        body["spec"] = spec
    if status is not None:
        body["status"] = status
    return body


def managers_of(obj: dict[str, Any]) -> set[str]:
    return {entry["manager"] for entry in obj["metadata"].get("managedFields", [])}


# -- server-side apply ----------------------------------------------------------------------------------


def test_apply_creates_and_an_identical_apply_changes_nothing(cluster: Cluster) -> None:
    objects = cluster.objects()
    first = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    again = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    assert first["data"] == {"a": "1"}
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert managers_of(again) == {"operator"}


def test_fields_of_another_manager_are_not_clobbered(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"ours": "1"}, labels={"app": "metax"}), field_manager="operator")
    objects.apply(cluster.configmap("cm", {"theirs": "x"}, labels={"team": "gpu"}), field_manager="admin")
    result = objects.apply(cluster.configmap("cm", {"ours": "2"}, labels={"app": "metax"}), field_manager="operator")
    assert result["data"] == {"ours": "2", "theirs": "x"}
    assert result["metadata"]["labels"] == {"app": "metax", "team": "gpu"}
    assert managers_of(result) == {"operator", "admin"}


def test_a_field_owned_by_another_manager_conflicts_unless_forced(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"mode": "sgpu"}), field_manager="admin")
    with pytest.raises(Conflict, match=r'conflict.*"admin"') as caught:
        objects.apply(cluster.configmap("cm", {"mode": "native"}), field_manager="operator")
    assert caught.value.status == 409
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace)["data"] == {"mode": "sgpu"}  # type: ignore[index]
    same_value = objects.apply(cluster.configmap("cm", {"mode": "sgpu"}), field_manager="operator")
    assert same_value["data"] == {"mode": "sgpu"}  # the same value is shared ownership, not a conflict
    forced = objects.apply(cluster.configmap("cm", {"mode": "native"}), field_manager="operator", force=True)
    assert forced["data"] == {"mode": "native"}


def test_fields_a_manager_stops_applying_are_removed_unless_someone_else_owns_them(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"a": "1", "b": "2", "shared": "s"}), field_manager="operator")
    objects.apply(cluster.configmap("cm", {"shared": "s"}), field_manager="admin")
    result = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    assert result["data"] == {"a": "1", "shared": "s"}


def test_a_write_by_someone_else_takes_the_field_over(cluster: Cluster) -> None:
    objects = cluster.objects()
    objects.apply(cluster.configmap("cm", {"mode": "sgpu", "other": "1"}), field_manager="operator")
    cluster.api.merge_patch(
        "v1", "ConfigMap", "cm", {"data": {"mode": "native"}}, namespace=cluster.namespace, field_manager="kubectl-edit"
    )
    with pytest.raises(Conflict, match='conflict with "kubectl-edit"'):
        objects.apply(cluster.configmap("cm", {"mode": "sgpu", "other": "1"}), field_manager="operator")
    kept = objects.apply(cluster.configmap("cm", {"mode": "native", "other": "2"}), field_manager="operator")
    assert kept["data"] == {"mode": "native", "other": "2"}


def test_finalizers_hold_a_deleted_object_until_removed(cluster: Cluster) -> None:
    objects = cluster.objects()
    body = cluster.configmap("cm", {"a": "1"})
    body["metadata"]["finalizers"] = ["metax-tech.com/cleanup"]
    objects.apply(body, field_manager="operator")
    watch = WatchCollector(objects.watch("v1", "ConfigMap", cluster.namespace, timeout_seconds=30))
    watch.wait_for(named("ADDED", "cm"))
    assert objects.delete("v1", "ConfigMap", "cm", cluster.namespace) is True
    held = objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    watch.wait_for(lambda e: named("MODIFIED", "cm")(e) and bool(e.object["metadata"].get("deletionTimestamp")))
    objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="operator")
    watch.wait_for(named("DELETED", "cm"))
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace) is None


def test_a_finalizer_list_is_set_only_on_the_version_it_was_decided_on(cluster: Cluster) -> None:
    objects = cluster.objects()
    first = objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="helm")
    decided_on = first["metadata"]["resourceVersion"]

    def set_to(finalizers: list[str], version: str) -> dict[str, Any]:
        return dict(
            objects.set_finalizers(
                "v1",
                "ConfigMap",
                "cm",
                finalizers,
                resource_version=version,
                field_manager="operator",
                namespace=cluster.namespace,
            )
        )

    held = set_to(["metax-tech.com/cleanup"], decided_on)
    assert held["metadata"]["finalizers"] == ["metax-tech.com/cleanup"] and held["data"] == {"a": "1"}
    with pytest.raises(Conflict):
        set_to([], decided_on)  # the object moved on since: decided again, never undone blindly
    assert objects.delete("v1", "ConfigMap", "cm", cluster.namespace) is True
    going = objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert going is not None and going["metadata"]["finalizers"] == ["metax-tech.com/cleanup"]
    set_to([], going["metadata"]["resourceVersion"])
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace) is None
    with pytest.raises(NotFound):
        set_to([], going["metadata"]["resourceVersion"])


def test_dry_run_apply_admits_without_storing(cluster: Cluster) -> None:
    objects = cluster.objects()
    preview = objects.apply(widget(cluster, "w", {"color": "red"}), field_manager="operator", dry_run=True)
    assert preview["spec"] == {"color": "red", "size": 1}
    assert objects.get(WIDGET_API, "Widget", "w", cluster.namespace) is None


def test_status_subresource_is_written_apart_from_the_spec(cluster: Cluster) -> None:
    objects = cluster.objects()
    created = objects.apply(widget(cluster, "w", {"size": 2}, status={"phase": "ignored"}), field_manager="operator")
    assert "status" not in created and created["metadata"]["generation"] == 1
    with_status = objects.apply_status(
        widget(cluster, "w", status={"phase": "Ready", "ready": 2}), field_manager="operator-status"
    )
    assert with_status["status"] == {"phase": "Ready", "ready": 2}
    assert with_status["spec"]["size"] == 2 and with_status["metadata"]["generation"] == 1
    changed = objects.apply(widget(cluster, "w", {"size": 3}), field_manager="operator")
    assert changed["metadata"]["generation"] == 2 and changed["status"]["phase"] == "Ready"


# -- errors -----------------------------------------------------------------------------------------------


def test_missing_objects_and_duplicates(cluster: Cluster) -> None:
    objects = cluster.objects()
    assert objects.get("v1", "ConfigMap", "nope", cluster.namespace) is None
    assert objects.delete("v1", "ConfigMap", "nope", cluster.namespace) is False
    cluster.api.create(cluster.configmap("cm", {}), field_manager="test")
    with pytest.raises(Conflict, match="already exists"):
        cluster.api.create(cluster.configmap("cm", {}), field_manager="test")
    assert objects.delete("v1", "ConfigMap", "cm", cluster.namespace) is True
    with pytest.raises(NotFound, match="not found"):
        cluster.api.merge_patch("v1", "ConfigMap", "cm", {"data": {"a": "1"}}, namespace=cluster.namespace)


def test_a_stale_resource_version_is_a_conflict(cluster: Cluster) -> None:
    created = cluster.api.create(cluster.configmap("cm", {"a": "1"}), field_manager="test")
    cluster.api.merge_patch("v1", "ConfigMap", "cm", {"data": {"a": "2"}}, namespace=cluster.namespace)
    stale = {**created, "data": {"a": "3"}}
    with pytest.raises(Conflict, match="has been modified"):
        cluster.api.replace(stale, field_manager="test")


def test_unknown_kinds_and_missing_namespaces_are_refused(cluster: Cluster) -> None:
    objects = cluster.objects()
    with pytest.raises(ClusterError, match="does not serve"):
        objects.list("example.com/v1", "Nothing")
    with pytest.raises(NotFound, match='namespaces "no-such-namespace" not found'):
        objects.apply(
            {**cluster.configmap("cm", {}), "metadata": {"name": "cm", "namespace": "no-such-namespace"}},
            field_manager="t",
        )


def test_an_unloadable_kubeconfig_is_a_cluster_error(tmp_path: Any) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ClusterError, match=f"configure the Kubernetes API client failed: kubeconfig {broken}"):
        client.api_client(broken)


# -- schema admission of a custom kind --------------------------------------------------------------------


def test_schema_refuses_bad_values_and_unknown_fields(cluster: Cluster) -> None:
    objects = cluster.objects()
    with pytest.raises(
        ClusterError, match=r'spec\.color: Unsupported value: "blue": supported values: "red", "green"'
    ) as bad_enum:
        objects.apply(widget(cluster, "w", {"color": "blue"}), field_manager="operator")
    assert bad_enum.value.status == 422
    with pytest.raises(ClusterError, match=r"spec\.size.*greater than or equal to 0"):
        objects.apply(widget(cluster, "w", {"size": -1}), field_manager="operator")
    with pytest.raises(ClusterError, match=r'unknown field "spec\.colour"'):
        cluster.api.create(widget(cluster, "w", {"colour": "red"}), field_manager="operator")
    with pytest.raises(ClusterError, match=r"\.spec\.colour: field not declared in schema") as typed:
        objects.apply(widget(cluster, "w", {"colour": "red"}), field_manager="operator")
    assert not isinstance(typed.value, retry.Retryable)
    with pytest.raises(ClusterError, match=r"\.spec\.size: expected numeric"):
        objects.apply(widget(cluster, "w", {"size": "big"}), field_manager="operator")
    assert objects.get(WIDGET_API, "Widget", "w", cluster.namespace) is None


def test_schema_defaults_are_filled_in(cluster: Cluster) -> None:
    created = cluster.objects().apply(widget(cluster, "w", {"color": "green"}), field_manager="operator")
    assert created["spec"] == {"color": "green", "size": 1}


def install_cluster_operator_crd(cluster: Cluster) -> None:
    cluster.api.apply(crd.crd(), field_manager="contract-tests", force=True)
    wait_served(cluster.api, CO_API, spec.KIND)


def cluster_operator(body: dict[str, Any], name: str = spec.OBJECT_NAME) -> dict[str, Any]:
    return {"apiVersion": CO_API, "kind": spec.KIND, "metadata": {"name": name}, "spec": body}


def test_the_cluster_operator_crd_fills_every_default(cluster: Cluster) -> None:
    install_cluster_operator_crd(cluster)
    result = cluster.objects().apply(
        cluster_operator({"driver": {"payload": {"version": "2.31.0"}}}), field_manager="t", dry_run=True
    )
    expected = spec.ClusterOperatorSpec(driver=spec.Driver(payload=spec.DriverPayload(version="2.31.0")))
    every_default = converter.unstructure(expected)
    # a field this release added has no default: absent unless set, so an older release never reads it back
    assert result["spec"] == {k: v for k, v in every_default.items() if k not in spec.NEW_FIELDS}
    assert result["spec"]["driver"]["upgradePolicy"]["maxParallel"] == "100%"
    with_new = cluster.objects().apply(
        cluster_operator({"driver": {"payload": {"version": "2.31.0"}}, "agentUpdate": {}}),
        field_manager="t",
        dry_run=True,
    )
    assert with_new["spec"]["agentUpdate"] == every_default["agentUpdate"]  # set, its own fields are defaulted


def test_the_cluster_operator_crd_refuses_bad_values_with_the_field_and_the_choices(cluster: Cluster) -> None:
    install_cluster_operator_crd(cluster)
    objects = cluster.objects()
    with pytest.raises(
        ClusterError,
        match=r'spec\.driver\.deployPolicy: Unsupported value: "Sometimes": '
        r'supported values: "PreferCloud", "PreferHost", "PreferNewer", "Never"',
    ):
        objects.apply(cluster_operator({"driver": {"deployPolicy": "Sometimes"}}), field_manager="t", dry_run=True)
    with pytest.raises(
        ClusterError, match=r"spec\.driver\.upgradePolicy\.maxParallel: Invalid value: \"50 percent\".*should match"
    ):
        objects.apply(
            cluster_operator({"driver": {"upgradePolicy": {"maxParallel": "50 percent"}}}),
            field_manager="t",
            dry_run=True,
        )
    with pytest.raises(ClusterError, match=r"maxUnavailable.*should match"):
        objects.apply(
            cluster_operator({"driver": {"upgradePolicy": {"maxUnavailable": "150%"}}}), field_manager="t", dry_run=True
        )
    with pytest.raises(ClusterError, match=r"spec\.gpuDevice\.healthyInterval.*greater than or equal to 0"):
        objects.apply(cluster_operator({"gpuDevice": {"healthyInterval": -5}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r'unknown field "spec\.driver\.deployPolicyy"'):
        cluster.api.create(cluster_operator({"driver": {"deployPolicyy": "Never"}}), field_manager="t", dry_run=True)
    with pytest.raises(ClusterError, match=r"\.spec\.driver\.deployPolicyy: field not declared in schema"):
        objects.apply(cluster_operator({"driver": {"deployPolicyy": "Never"}}), field_manager="t", dry_run=True)
    accepted = objects.apply(
        cluster_operator({"driver": {"upgradePolicy": {"maxParallel": 3}}}), field_manager="t", dry_run=True
    )
    assert accepted["spec"]["driver"]["upgradePolicy"]["maxParallel"] == 3


# -- selectors ---------------------------------------------------------------------------------------------


def test_label_selectors_equality_and_set_based(cluster: Cluster) -> None:
    objects = cluster.objects()
    for name, labels in [
        ("a", {"tier": "gpu", "zone": "x"}),
        ("b", {"tier": "cpu", "zone": "y"}),
        ("c", {"zone": "z"}),
    ]:
        objects.apply(cluster.configmap(name, {}, labels={"suite": "sel", **labels}), field_manager="t")

    def names(selector: str) -> list[str]:
        # "suite=sel": controllers add their own objects to every namespace (kube-root-ca.crt).
        listing = objects.list("v1", "ConfigMap", cluster.namespace, f"suite=sel,{selector}")
        return sorted(o["metadata"]["name"] for o in listing.items)

    assert names("tier=gpu") == ["a"]
    assert names("tier==gpu,zone=x") == ["a"]
    assert names("tier!=gpu") == ["b", "c"]
    assert names("zone in (x, z)") == ["a", "c"]
    assert names("zone notin (x)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    with pytest.raises(ClusterError, match="400"):
        names("zone in (x")


def test_field_selectors_by_name_and_node(cluster: Cluster) -> None:
    objects = cluster.objects()
    for name in ("a", "b"):
        objects.apply(cluster.configmap(name, {}, labels={"suite": "sel"}), field_manager="t")

    def names(kind: str, field_selector: str) -> list[str]:
        listing = objects.list("v1", kind, cluster.namespace, "suite=sel", field_selector)
        return sorted(o["metadata"]["name"] for o in listing.items)

    assert names("ConfigMap", "metadata.name=b") == ["b"]
    assert names("ConfigMap", "metadata.name!=b") == ["a"]
    with pytest.raises(ClusterError, match='"spec.nodeName" is not a known field selector'):
        names("ConfigMap", "spec.nodeName=x")
    objects.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": cluster.namespace}},
        field_manager="t",
        force=True,
    )
    for pod, node in (("p1", "no-such-node-a"), ("p2", "no-such-node-b")):
        objects.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": cluster.namespace, "labels": {"suite": "sel"}},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
            field_manager="t",
        )
    assert names("Pod", "spec.nodeName=no-such-node-b") == ["p2"]


def test_a_list_keeps_what_its_transform_returns_page_by_page(cluster: Cluster) -> None:
    """Issue 11 (P3): the operator lists thousands of pods for a few fields; the transform sees each whole."""
    seeding = cluster.objects()
    for i in range(5):
        seeding.apply(cluster.configmap(f"cm-{i}", {"i": str(i)}, labels={"suite": "transform"}), field_manager="t")
    # Pages of two on the real server: five objects come in three pages, each transformed as it arrives.
    api = client.HttpApi(cluster.api.client, list_chunk=2) if isinstance(cluster.api, client.HttpApi) else cluster.api
    seen: list[tuple[str, str]] = []

    def odd_names(obj: Any) -> dict[str, Any] | None:
        seen.append((obj["apiVersion"], obj["kind"]))
        i = int(obj["data"]["i"])
        return {"name": obj["metadata"]["name"]} if i % 2 else None

    listing = cluster.objects(api=api).list(
        "v1", "ConfigMap", cluster.namespace, "suite=transform", transform=odd_names
    )
    assert sorted(item["name"] for item in listing.items) == ["cm-1", "cm-3"]
    assert seen == [("v1", "ConfigMap")] * 5
    assert int(listing.resource_version) > 0
    whole = seeding.list("v1", "ConfigMap", cluster.namespace, "suite=transform")
    assert sorted(o["data"]["i"] for o in whole.items) == ["0", "1", "2", "3", "4"]


def test_rbac_names_may_hold_a_colon_and_other_names_may_not(cluster: Cluster) -> None:
    """kube-apiserver names RBAC objects by path segment (``metax-operator:metax-driver``), others by DNS subdomain."""
    objects = cluster.objects()
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "metax-test:reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
    }
    assert objects.apply(role, field_manager="t", dry_run=True)["metadata"]["name"] == "metax-test:reader"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a:b", "namespace": cluster.namespace}}
    with pytest.raises(ClusterError, match="metadata.name"):
        objects.apply(config_map, field_manager="t", dry_run=True)
