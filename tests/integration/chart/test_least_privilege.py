"""Least privilege, checked by the real RBAC authorizer (R-SECURITY, 000 Table 1.3.1).

The chart is installed with the README's command; then every component's ServiceAccount and roles
(`metax_core.cluster.rbac`, what the operator renders) are applied *as the operator's ServiceAccount*
(impersonated), which proves the operator can grant them without ``escalate``. Then a SubjectAccessReview
matrix, per ServiceAccount: every permission its rules list is allowed (in the scope they apply to), and a
list of dangerous ones is denied for everyone (Secrets cluster-wide or in kube-system, pods/exec, nodes
delete, escalate and bind of other roles; the data-exporter's default account may do nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from metax_core.cluster import rbac
from metax_core.components import Component
from metax_core.errors import ClusterError, NotFound
from metax_dev.controlplane import cluster
from metax_k8s import client
from tests.support.chart import NAMESPACE, RELEASE, Helm, install_command

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(control_plane.kubeconfig_path))


def _component_objects() -> list[dict[str, Any]]:
    return [o for c in Component for o in rbac.objects(c, NAMESPACE)]


@pytest.fixture(scope="module")
def installed(
    control_plane: cluster.ControlPlane, api: client.HttpApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    helm = Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm"))
    operator_client = control_plane.api_client()
    operator_client.set_default_header("Impersonate-User", _user(rbac.OPERATOR_ACCOUNT))
    as_operator = client.HttpApi(operator_client)
    try:
        # the doctor's optional read-only account too (operator.doctor.enabled, R-DOCTOR), with a subject
        doctor_subjects = '[{"kind":"Group","name":"gpu-admins","apiGroup":"rbac.authorization.k8s.io"}]'
        helm.run(
            *install_command("r.example/metax", "2.18.0"),
            "--set",
            "operator.doctor.enabled=true",
            "--set-json",
            f"operator.doctor.subjects={doctor_subjects}",
        )
        with pytest.raises(ClusterError, match="403"):  # the impersonation is real
            as_operator.list("v1", "Secret", namespace="kube-system")
        for obj in _component_objects():
            as_operator.apply(obj, field_manager="metax-operator")
        yield
    finally:
        for obj in reversed(_component_objects()):
            meta = obj["metadata"]
            with contextlib.suppress(NotFound):
                api.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
        operator_client.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


def _user(account: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{account}"


def _allowed(
    api: client.HttpApi,
    account: str,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = "",
    name: str = "",
    subresource: str = "",
) -> bool:
    attributes = {
        "verb": verb,
        "group": group,
        "resource": resource,
        "namespace": namespace,
        "name": name,
        "subresource": subresource,
    }
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": _user(account),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
            "resourceAttributes": {k: v for k, v in attributes.items() if v},
        },
    }
    answer = kubernetes.client.AuthorizationV1Api(api.client).create_subject_access_review(review)
    return bool(answer.status.allowed)


ACCOUNTS = [rbac.OPERATOR_ACCOUNT, *rbac.COMPONENT_RULES, rbac.DOCTOR_ACCOUNT]


def _needed(account: str) -> rbac.AccountRules:
    if account == rbac.DOCTOR_ACCOUNT:
        return rbac.doctor_rules()
    return rbac.operator_rules() if account == rbac.OPERATOR_ACCOUNT else rbac.component_rules(account)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("account", ACCOUNTS)
def test_every_needed_permission_is_allowed(api: client.HttpApi, account: str) -> None:
    where = {rbac.Scope.CLUSTER: "", rbac.Scope.NAMESPACE: NAMESPACE, rbac.Scope.EVENTS: rbac.EVENTS_NAMESPACE}
    checked = 0
    for scope, rules in _needed(account).by_scope().items():
        for rule in rules:
            for resource in rule.resources:
                base, _, sub = resource.partition("/")
                for verb in rule.verbs:
                    for name in rule.names or ("",):
                        assert _allowed(
                            api,
                            account,
                            verb,
                            base,
                            group=rule.group,
                            namespace=where[scope],
                            name=name,
                            subresource=sub,
                        ), (account, scope, verb, resource, name)
                        checked += 1
    assert checked > 0


DANGEROUS = [
    pytest.param({"verb": "list", "resource": "secrets"}, id="secrets-cluster-wide"),
    pytest.param(
        {"verb": "get", "resource": "secrets", "namespace": "kube-system", "name": "x"}, id="secrets-kube-system"
    ),
    pytest.param({"verb": "get", "resource": "secrets", "namespace": NAMESPACE, "name": "other"}, id="other-secret"),
    pytest.param({"verb": "create", "resource": "pods", "subresource": "exec", "namespace": NAMESPACE}, id="pods-exec"),
    pytest.param({"verb": "delete", "resource": "nodes", "name": "n1"}, id="nodes-delete"),
    pytest.param(
        {"verb": "escalate", "resource": "clusterroles", "group": "rbac.authorization.k8s.io"},
        id="clusterroles-escalate",
    ),
    pytest.param(
        {"verb": "escalate", "resource": "roles", "group": "rbac.authorization.k8s.io", "namespace": NAMESPACE},
        id="roles-escalate",
    ),
    pytest.param(
        {"verb": "bind", "resource": "clusterroles", "group": "rbac.authorization.k8s.io", "name": "cluster-admin"},
        id="bind-cluster-admin",
    ),
    pytest.param(
        {"verb": "delete", "resource": "customresourcedefinitions", "group": "apiextensions.k8s.io"}, id="delete-crds"
    ),
]


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("attributes", DANGEROUS)
@pytest.mark.parametrize("account", [*ACCOUNTS, "default"])
def test_dangerous_permissions_are_denied_for_every_account(
    api: client.HttpApi, account: str, attributes: dict[str, str]
) -> None:
    assert not _allowed(api, account, **attributes)


@pytest.mark.usefixtures("installed")
def test_the_issue_examples_and_the_exporters_default_account(api: client.HttpApi) -> None:
    assert _allowed(api, "metax-gpu-label", "patch", "nodes", name="n1")
    assert _allowed(api, "metax-driver", "get", "nodes", name="n1")
    assert _allowed(api, "metax-driver", "create", "events", group="events.k8s.io", namespace="default")
    assert _allowed(api, "metax-driver", "get", "configmaps", namespace=NAMESPACE, name="driver-config")
    assert not _allowed(api, "metax-driver", "get", "configmaps", namespace=NAMESPACE, name="metax-vfio-config")
    assert _allowed(api, "metax-gpu-device", "get", "nodes", name="n1")
    assert not _allowed(api, "metax-gpu-device", "list", "pods")
    assert not _allowed(api, "metax-topo-master", "patch", "nodes", name="n1")
    # The doctor reads only (R-DOCTOR): no write, no logs, no other ConfigMap; its extra subject gets the same.
    assert _allowed(api, rbac.DOCTOR_ACCOUNT, "list", "pods", namespace=NAMESPACE)
    for verb, resource, namespace, name in (
        ("patch", "nodes", "", "n1"),
        ("delete", "pods", NAMESPACE, "p"),
        ("get", "pods", NAMESPACE, "p"),
        ("watch", "nodes", "", ""),
        ("get", "configmaps", NAMESPACE, "metax-vfio-config"),
        ("create", "events", "default", ""),
    ):
        assert not _allowed(api, rbac.DOCTOR_ACCOUNT, verb, resource, namespace=namespace, name=name), (verb, resource)
    assert not _allowed(api, rbac.DOCTOR_ACCOUNT, "get", "pods", namespace=NAMESPACE, name="p", subresource="log")
    assert not _allowed(api, rbac.DOCTOR_ACCOUNT, "update", "clusteroperators", group="gpu.metax-tech.com", name="x")
    group_review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "alice",
            "groups": ["gpu-admins", "system:authenticated"],
            "resourceAttributes": {"verb": "list", "resource": "nodes"},
        },
    }
    answer = kubernetes.client.AuthorizationV1Api(api.client).create_subject_access_review(group_review)
    assert answer.status.allowed, "operator.doctor.subjects are bound to the doctor's roles"
    # The data-exporter runs on the namespace's default account, which gets nothing.
    for verb, resource in (("get", "nodes"), ("list", "pods"), ("get", "configmaps")):
        assert not _allowed(api, "default", verb, resource, namespace=NAMESPACE)
