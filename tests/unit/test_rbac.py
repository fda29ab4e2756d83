"""RBAC as data (R-SECURITY, 000 Table 1.3.1): accounts per workload, least privilege, no wildcard.

Covers: every ServiceAccount of Table 1.3.1 and only those (the data-exporter has none); the rendered objects
in deploy order before the workloads; no ``*`` anywhere; nothing dangerous for anyone (Secrets cluster-wide,
pods/exec, nodes delete, escalate); the operator holds whatever it grants, in the same scope (so it never
needs ``escalate``). The real API server checks the same with SubjectAccessReviews in
tests/integration/chart/test_least_privilege.py.
"""

from __future__ import annotations

import pytest

from metax_core import components
from metax_core.cluster import rbac, workloads
from metax_core.components import Component
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE

# 000 Table 1.3.1: workload -> ServiceAccount (None: the namespace's default account).
TABLE_1_3_1 = {
    "metax-operator": "metax-operator",
    "metax-gpu-label": "metax-gpu-label",
    "metax-gpu-discovery": "metax-gpu-discovery",  # issue 38 item 3, beyond the table: gpu-label's unprivileged half
    "metax-gpu-device": "metax-gpu-device",
    "metax-container-runtime": "metax-container-runtime",
    "metax-driver": "metax-driver",
    "metax-maca": "metax-maca",
    "metax-topo-master": "metax-topo-master",
    "metax-topo-worker": "metax-topo-worker",
    "metax-data-exporter": None,
    "metax-gpu-scheduler": "metax-gpu-scheduler",
    "metax-dra-driver": "metax-dra-driver",  # R-DRA, an extension beyond the table
}


def _all_rules() -> list[tuple[str, rbac.Rule]]:
    found = []
    for account in [*rbac.COMPONENT_RULES.values(), rbac.operator_rules()]:
        for rules in account.by_scope().values():
            found += [(account.account, r) for r in rules]
    return found


def test_every_workload_of_table_1_3_1_runs_as_its_own_account() -> None:
    workloads_by_name = {w.name: w for info in components.CATALOGUE for w in info.workloads}
    workloads_by_name["metax-operator"] = components.OPERATOR_WORKLOAD
    for name, account in TABLE_1_3_1.items():
        assert workloads_by_name[name].service_account == account
    expected = {a for a in TABLE_1_3_1.values() if a} - {"metax-operator"} | {"metax-vfio-manager"}
    assert set(rbac.COMPONENT_RULES) == expected


def test_no_rule_uses_a_wildcard() -> None:
    for account, rule in _all_rules():
        assert "*" not in (rule.group, *rule.resources, *rule.verbs, *rule.names), account


@pytest.mark.parametrize(
    ("resource", "verb"),
    [("pods/exec", "create"), ("nodes", "delete"), ("clusterroles", "escalate"), ("roles", "escalate")],
)
def test_nobody_gets_a_dangerous_permission(resource: str, verb: str) -> None:
    for account, rule in _all_rules():
        assert not (resource in rule.resources and verb in rule.verbs), (account, rule)


def test_secrets_only_for_the_operator_in_its_namespace_and_only_its_webhook_secret_by_name() -> None:
    for account, rule in _all_rules():
        if "secrets" in rule.resources:
            assert account == "metax-operator"
    operator = rbac.operator_rules()
    assert not [r for r in (*operator.cluster, *operator.events) if "secrets" in r.resources]
    readable = [r for r in operator.namespace if "secrets" in r.resources and "get" in r.verbs]
    assert readable and all(r.names == (rbac.WEBHOOK_NAME,) for r in readable)


def _allowed(rules: tuple[rbac.Rule, ...], group: str, resource: str, verb: str, name: str = "") -> bool:
    return any(
        r.group == group and resource in r.resources and verb in r.verbs and (not r.names or name in r.names)
        for r in rules
    )


def test_the_operator_holds_every_permission_it_grants_in_the_same_scope() -> None:
    operator = rbac.operator_rules().by_scope()
    for account in rbac.COMPONENT_RULES.values():
        for scope, rules in account.by_scope().items():
            for rule in rules:
                for resource in rule.resources:
                    for verb in rule.verbs:
                        for name in rule.names or ("",):
                            assert _allowed(operator[scope], rule.group, resource, verb, name), (
                                account.account,
                                scope,
                                resource,
                                verb,
                            )


def test_bind_is_limited_to_the_component_roles() -> None:
    for account, rule in _all_rules():
        if "bind" in rule.verbs:
            assert account == "metax-operator"
            assert rule.names and all(n.startswith("metax-") for n in rule.names)


def test_the_operator_renders_accounts_and_roles_before_each_workload() -> None:
    values = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "1.0.0"}}, "exporter": {"deploy": True}}
    objects = workloads.render(validation.parse(values)).objects
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    driver = kinds.index(("DaemonSet", "metax-driver"))
    assert kinds[driver - 7 : driver] == [
        ("ServiceAccount", "metax-driver"),
        ("ClusterRole", "metax-operator:metax-driver"),
        ("ClusterRoleBinding", "metax-operator:metax-driver"),
        ("Role", "metax-driver"),
        ("RoleBinding", "metax-driver"),
        ("Role", "metax-driver-events"),
        ("RoleBinding", "metax-driver-events"),
    ]
    binding = objects[driver - 5]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "metax-driver", "namespace": "metax-operator"}]
    events_role = objects[driver - 2]
    assert events_role["metadata"]["namespace"] == "default"
    # The data-exporter runs on the default account, without a token: no RBAC object of its own.
    assert not [o for o in objects if o["metadata"]["name"] == "metax-data-exporter" and "Role" in o["kind"]]
    assert not [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "metax-data-exporter"]


def test_accounts_follow_the_catalogue() -> None:
    assert rbac.accounts(Component.TOPO) == ("metax-topo-master", "metax-topo-worker")
    assert rbac.accounts(Component.EXPORTER) == ()


def test_the_rbac_of_components_not_deployed_is_removed_bindings_first_and_what_is_deployed_stays() -> None:
    removed = rbac.to_remove([Component.MACA, Component.GPU_DEVICE], "metax-operator")
    names = [(o["kind"], o["metadata"]["name"]) for o in removed]
    assert names == [
        ("ClusterRoleBinding", "metax-operator:metax-maca"),
        ("RoleBinding", "metax-maca-events"),
        ("ClusterRoleBinding", "metax-operator:metax-gpu-device"),
        ("RoleBinding", "metax-gpu-device-events"),
        ("ClusterRole", "metax-operator:metax-maca"),
        ("Role", "metax-maca-events"),
        ("ClusterRole", "metax-operator:metax-gpu-device"),
        ("Role", "metax-gpu-device-events"),
        ("ServiceAccount", "metax-maca"),
        ("ServiceAccount", "metax-gpu-device"),
    ]
    # An object a deployed component still renders is never removed (R-DEP: only what is not deployed goes).
    kept = rbac.objects(Component.MACA, "metax-operator")[:1]  # the metax-maca ServiceAccount
    assert ("ServiceAccount", "metax-maca") not in [
        (o["kind"], o["metadata"]["name"]) for o in rbac.to_remove([Component.MACA], "metax-operator", kept)
    ]
    assert rbac.to_remove([Component.EXPORTER], "metax-operator") == []  # the data-exporter has no account


@pytest.mark.parametrize("namespace", ["metax-operator", rbac.EVENTS_NAMESPACE])
def test_every_rendered_rbac_object_lives_where_the_operator_watches_and_cleans_up(namespace: str) -> None:
    where = rbac.locations(namespace)
    assert len(where) == len(set(where))  # the events namespace is not listed twice when it is the operator's
    rendered = {
        (o["apiVersion"], o["kind"], o["metadata"].get("namespace"))
        for component in Component
        for o in rbac.objects(component, namespace)
    }
    assert rendered <= set(where)
    for api_version, kind, scope in where:  # a binding is removed before the role it names
        if kind in ("Role", "ClusterRole"):
            assert where.index((api_version, f"{kind}Binding", scope)) < where.index((api_version, kind, scope))


def test_every_node_agent_may_watch_its_own_node() -> None:
    """The node agents watch their Node by name (services/_agent/watch.py: a list + watch with
    ``fieldSelector=metadata.name``); RBAC cannot scope that to a name the role does not know, so every
    DaemonSet account that reads its node holds get, list and watch on nodes. With get and patch only, the
    real node's pods were refused (403) and noticed changes only at their resync."""
    daemonsets = {
        w.service_account
        for info in components.CATALOGUE
        for w in info.workloads
        if w.kind is components.WorkloadKind.DAEMON_SET and w.service_account
    }
    assert daemonsets
    for account in daemonsets:
        rules = rbac.component_rules(account)
        node_rules = [r for r in rules.cluster if "nodes" in r.resources and r.group == "" and not r.names]
        assert node_rules, account
        verbs = {v for r in node_rules for v in r.verbs}
        assert {"get", "list", "watch", "patch"} <= verbs, (account, sorted(verbs))
