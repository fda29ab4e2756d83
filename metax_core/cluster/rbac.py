"""Who may do what: every ServiceAccount, Role and ClusterRole of the product, least privilege (R-SECURITY).

Why it exists: 000 Table 1.3.1 gives each workload its own ServiceAccount (the data-exporter runs on the
namespace's default one, without a token) and says the operator itself is unprivileged. The Kubernetes
permissions behind those accounts are decided here, once, as data:

* `component_rules` — what each node agent or controller may do, cluster-wide (nodes) and in the operator
  namespace (its ConfigMap) and in ``default`` (Events about its node, which live there; see
  `metax_k8s.events`). The operator renders them with the workloads (`objects`), in deploy order, so an agent
  never starts without its account.
* `operator_rules` — the operator's own ClusterRole and Role. The chart's ``templates/operator-rbac.yaml`` is
  generated from it (`metax_k8s.chart`), so the chart and the code cannot disagree. It holds every permission
  it hands to a component (Kubernetes refuses to create a role with rules its creator lacks), which is why no
  account needs ``escalate``; ``bind`` is limited to the component roles by name.

No rule uses ``*``; nothing may read Secrets cluster-wide, exec into pods, or delete nodes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core import components
from metax_core.components import Component, access
from metax_core.dra import classes as dra_classes
from metax_core.runtime import handler
from metax_core.spec import model as spec
from metax_core.wire import meta

MANAGED_BY_LABEL = meta.MANAGED_BY_LABEL
PART_OF_LABEL = meta.PART_OF_LABEL
MANAGED_BY = meta.MANAGED_BY
PART_OF = meta.PART_OF
EVENTS_NAMESPACE = "default"
RBAC_API = "rbac.authorization.k8s.io/v1"
"""Events about cluster-scoped objects (nodes, the ClusterOperator) go here (kubectl looks for them here)."""
OPERATOR_ACCOUNT = "metax-operator"
WEBHOOK_NAME = "metax-operator-webhook"
"""The ValidatingWebhookConfiguration, its Service and its certificate Secret share this name."""
OPERATOR_LEASE = "metax-operator-leader"
"""The operator replicas' leader Lease in its namespace (`services.operator.leader`)."""
CLUSTER_ROLE_PREFIX = "metax-operator:"
"""Component ClusterRoles are named ``metax-operator:<account>``, so they sort together and say who made them."""

READ = access.READ
WRITE = access.WRITE
Rule = access.Rule


class Scope(enum.Enum):
    CLUSTER = "cluster"
    """A ClusterRole + ClusterRoleBinding."""
    NAMESPACE = "namespace"
    """A Role + RoleBinding in the operator namespace."""
    EVENTS = "events"
    """A Role + RoleBinding in ``default``, where Events about nodes live."""


@attrs.frozen
class AccountRules:
    """The permissions of one ServiceAccount, by where they apply."""

    account: str
    cluster: tuple[Rule, ...] = ()
    namespace: tuple[Rule, ...] = ()
    events: tuple[Rule, ...] = ()

    def by_scope(self) -> Mapping[Scope, tuple[Rule, ...]]:
        return {Scope.CLUSTER: self.cluster, Scope.NAMESPACE: self.namespace, Scope.EVENTS: self.events}


COMPONENT_RULES: Mapping[str, AccountRules] = {
    w.name: AccountRules(w.name, cluster=w.access.cluster, namespace=w.access.namespace, events=w.access.events)
    for w in components.WORKLOADS.values()
    if w.access is not None
}
"""Per ServiceAccount of 000 Table 1.3.1, from each workload's declaration (`metax_core.components.catalogue`; the
data-exporter has none: the default account, no token)."""


def component_rules(account: str) -> AccountRules:
    return COMPONENT_RULES[account]


def accounts(component: Component) -> tuple[str, ...]:
    """The ServiceAccounts of ``component``'s workloads (Table 1.3.1), in catalogue order."""
    return tuple(w.service_account for w in components.BY_COMPONENT[component].workloads if w.service_account)


def role_name(account: str, scope: Scope) -> str:
    """The Role/ClusterRole (and its binding) of ``account`` in ``scope``."""
    if scope is Scope.CLUSTER:
        return CLUSTER_ROLE_PREFIX + account
    return f"{account}-events" if scope is Scope.EVENTS else account


COMPONENT_LABEL = meta.COMPONENT_LABEL


def _labels(account: str, component: Component | None = None) -> dict[str, str]:
    labels = {meta.APP_LABEL: account, MANAGED_BY_LABEL: MANAGED_BY, PART_OF_LABEL: PART_OF}
    if component is not None:
        labels[COMPONENT_LABEL] = component.value
    return labels


def _role_objects(
    account: str, scope: Scope, rules: Sequence[Rule], namespace: str, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    name = role_name(account, scope)
    kind = "ClusterRole" if scope is Scope.CLUSTER else "Role"
    where = {} if scope is Scope.CLUSTER else {"namespace": EVENTS_NAMESPACE if scope is Scope.EVENTS else namespace}
    role = {
        "apiVersion": RBAC_API,
        "kind": kind,
        "metadata": {"name": name, **where, "labels": dict(labels)},
        "rules": [r.manifest() for r in rules],
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": f"{kind}Binding",
        "metadata": {"name": name, **where, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    return [role, binding]


def account_objects(account: str, namespace: str, component: Component | None = None) -> list[dict[str, Any]]:
    """The ServiceAccount, then each non-empty Role/ClusterRole with its binding."""
    labels = _labels(account, component)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace, "labels": dict(labels)},
        }
    ]
    for scope, rules in component_rules(account).by_scope().items():
        if rules:
            objects += _role_objects(account, scope, rules, namespace, labels)
    return objects


def locations(namespace: str) -> list[tuple[str, str, str | None]]:
    """Where the components' RBAC objects live, as (apiVersion, kind, namespace; None: cluster-wide), bindings
    before roles: ServiceAccounts, RoleBindings and Roles in the operator's ``namespace``, the events
    RoleBindings and Roles in `EVENTS_NAMESPACE`, ClusterRoleBindings and ClusterRoles. What the operator
    watches, and where its cleanup looks (its own role allows no more)."""
    found: list[tuple[str, str, str | None]] = [
        ("v1", "ServiceAccount", namespace),
        (RBAC_API, "RoleBinding", namespace),
        (RBAC_API, "Role", namespace),
    ]
    if namespace != EVENTS_NAMESPACE:
        found += [(RBAC_API, "RoleBinding", EVENTS_NAMESPACE), (RBAC_API, "Role", EVENTS_NAMESPACE)]
    return [*found, (RBAC_API, "ClusterRoleBinding", None), (RBAC_API, "ClusterRole", None)]


def objects(component: Component, namespace: str = spec.NAMESPACE) -> list[dict[str, Any]]:
    """Every RBAC object ``component``'s workloads need, to apply before the workloads themselves."""
    return [obj for account in accounts(component) for obj in account_objects(account, namespace, component)]


_REMOVAL_RANK = {"ClusterRoleBinding": 0, "RoleBinding": 0, "ClusterRole": 1, "Role": 1, "ServiceAccount": 2}


def to_remove(
    undeployed: Iterable[Component], namespace: str, keep: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The RBAC objects of components the operator does not deploy (disabled, or a prerequisite disabled:
    R-DEP), in the order to delete them: bindings, then roles, then ServiceAccounts. An object that one of
    ``keep`` (the rendered objects of the deployed components) also names stays."""
    kept = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in keep}
    found = [
        obj
        for component in undeployed
        for obj in objects(component, namespace)
        if (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]) not in kept
    ]
    return sorted(found, key=lambda o: _REMOVAL_RANK[o["kind"]])


# --- the operator itself (C1), rendered by the chart -------------------------------------------------------


def _union(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """Rules merged per (group, resource, names): one rule with the union of the verbs, in a stable order."""
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        for resource in rule.resources:
            verbs.setdefault((rule.group, resource, rule.names), set()).update(rule.verbs)
    order = ("get", "list", "watch", "create", "update", "patch", "delete", "bind")
    return tuple(
        Rule(group, (resource,), tuple(v for v in order if v in found), names)
        for (group, resource, names), found in sorted(verbs.items())
    )


def _component_role_names(scope: Scope) -> tuple[str, ...]:
    return tuple(sorted(role_name(a, scope) for a, r in COMPONENT_RULES.items() if r.by_scope()[scope]))


def operator_rules() -> AccountRules:
    """The operator's ClusterRole (cluster), Role in its namespace (namespace) and in ``default`` (events).

    What it does with each: reconciles the ClusterOperator and writes its status and finalizer; applies and
    removes the component workloads, Services, ConfigMaps, ServiceAccounts and RBAC; labels and cleans nodes;
    deletes driver pods node by node during a rollout and reads every pod to tell busy GPU nodes (R-ROLLOUT);
    with upgradePolicy.drain, cordons the nodes it drains and evicts their GPU pods (PodDisruptionBudgets read);
    sets each GPU node's MetaXGPUHealthy condition and, with gpuDevice.remediation: evict, evicts the pods holding
    an unusable GPU (R-HEALTH);
    keeps its leader Lease and fills its webhook certificate Secret (the chart creates it); patches the
    caBundle of its webhook configuration; emits Events.
    """
    group = spec.API_GROUP
    cluster_names = _component_role_names(Scope.CLUSTER)
    own = [
        Rule(group, ("clusteroperators",), (*READ, "update", "patch", "delete")),  # delete: the pre-delete hook
        Rule(group, ("clusteroperators/status",), ("get", "update", "patch")),
        Rule(group, ("clusteroperators/finalizers",), ("update",)),
        Rule("", ("nodes",), (*READ, "patch")),
        # R-HEALTH: the MetaXGPUHealthy condition from the node's health report (server-side apply, its own field
        # manager: the kubelet's conditions are untouched).
        Rule("", ("nodes/status",), ("patch",)),
        Rule("", ("pods",), READ),
        # upgradePolicy.drain (issue 41): GPU workloads are evicted, never deleted, so PodDisruptionBudgets hold;
        # the budgets are read to name the one that blocks a drain. Nodes are cordoned with the patch above.
        Rule("", ("pods/eviction",), ("create",)),
        Rule("policy", ("poddisruptionbudgets",), ("list",)),
        Rule("rbac.authorization.k8s.io", ("clusterroles", "clusterrolebindings"), ("list", "watch", "create")),
        Rule("rbac.authorization.k8s.io", ("clusterroles", "clusterrolebindings"), ("get", *WRITE), cluster_names),
        Rule("rbac.authorization.k8s.io", ("clusterroles",), ("bind",), cluster_names),
        Rule(
            "admissionregistration.k8s.io",
            ("validatingwebhookconfigurations",),
            ("get", "update", "patch"),
            (WEBHOOK_NAME,),
        ),
        # Its own CRD, by name: read, and patched with this release's schema at start (R-UPGRADE: Helm never
        # upgrades a chart's crds/, `metax_core.cluster.crd_policy`). Never created or deleted (the chart does).
        Rule("apiextensions.k8s.io", ("customresourcedefinitions",), ("get", "patch"), (f"clusteroperators.{group}",)),
        # The RuntimeClass `metax` (supporting.runtime_class): watched like every owned object, written by name.
        Rule("node.k8s.io", ("runtimeclasses",), ("list", "watch", "create")),
        Rule("node.k8s.io", ("runtimeclasses",), ("get", *WRITE), (handler.RUNTIME_HANDLER,)),
        # The DeviceClasses of the DRA driver (`metax_core.cluster.dra_objects`), the same way, by name.
        Rule(access.DRA_API_GROUP, ("deviceclasses",), ("list", "watch", "create")),
        Rule(access.DRA_API_GROUP, ("deviceclasses",), ("get", *WRITE), tuple(sorted(dra_classes.SELECTORS))),
        # Whether the Prometheus Operator's CRD exists (watched by name): the exporter's ServiceMonitor is
        # rendered only then.
        Rule(
            "apiextensions.k8s.io",
            ("customresourcedefinitions",),
            ("get", "list", "watch"),
            ("servicemonitors.monitoring.coreos.com",),
        ),
    ]
    namespace = [
        Rule("apps", ("daemonsets", "deployments"), (*READ, *WRITE)),
        Rule("", ("services", "configmaps", "serviceaccounts"), (*READ, *WRITE)),
        Rule("networking.k8s.io", ("networkpolicies",), (*READ, *WRITE)),  # the exporter's and the extender's
        Rule("", ("pods",), ("delete",)),
        Rule("monitoring.coreos.com", ("servicemonitors",), ("create",)),
        Rule(
            "monitoring.coreos.com",
            ("servicemonitors",),
            ("get", "update", "patch", "delete"),
            ("metax-data-exporter",),
        ),
        Rule("rbac.authorization.k8s.io", ("roles", "rolebindings"), (*READ, *WRITE)),
        Rule("rbac.authorization.k8s.io", ("roles",), ("bind",), _component_role_names(Scope.NAMESPACE)),
        Rule("coordination.k8s.io", ("leases",), (*READ, "create", "update", "patch")),
        # Its own Lease only, on its way out once cluster-operator is gone (R-INSTALL: nothing stays).
        Rule("coordination.k8s.io", ("leases",), ("delete",), (OPERATOR_LEASE,)),
        # The chart creates the (empty) webhook Secret, so the operator needs no "create" on Secrets.
        Rule("", ("secrets",), ("get", "update", "patch"), (WEBHOOK_NAME,)),
        *access.EVENTS,
    ]
    events = [
        *access.EVENTS,
        Rule("rbac.authorization.k8s.io", ("roles", "rolebindings"), ("list", "watch", "create")),
        Rule(
            "rbac.authorization.k8s.io", ("roles", "rolebindings"), ("get", *WRITE), _component_role_names(Scope.EVENTS)
        ),
        Rule("rbac.authorization.k8s.io", ("roles",), ("bind",), _component_role_names(Scope.EVENTS)),
    ]
    # Everything the operator grants, it must hold (RBAC escalation prevention), in the same scope.
    for rules in COMPONENT_RULES.values():
        own += rules.cluster
        namespace += rules.namespace
        events += rules.events
    return AccountRules(OPERATOR_ACCOUNT, cluster=_union(own), namespace=_union(namespace), events=_union(events))


DOCTOR_ACCOUNT = "metax-operator-doctor"
"""The read-only identity ``metax-operator doctor`` runs as, when the chart installs it (``operator.doctor``)."""


def doctor_rules() -> AccountRules:
    """What ``metax-operator doctor`` reads, and nothing else (R-DOCTOR, docs/doctor.md): cluster-operator and
    the Nodes, the product's pods, DaemonSets and ``driver-config`` in the operator namespace, the Events
    about Nodes in ``default``. Reads only: no watch, no write, no Secret, no pod logs."""
    return AccountRules(
        DOCTOR_ACCOUNT,
        cluster=(
            Rule(spec.API_GROUP, ("clusteroperators",), ("get",)),
            Rule("", ("nodes",), ("get", "list")),
        ),
        namespace=(
            Rule("", ("pods",), ("list",)),
            Rule("apps", ("daemonsets",), ("list",)),
            Rule("", ("configmaps",), ("get",), (meta.DRIVER_CONFIG_MAP,)),
        ),
        events=(Rule("events.k8s.io", ("events",), ("list",)),),
    )


def doctor_objects(namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The doctor's ServiceAccount, ClusterRole, Roles and their bindings (the chart's ``doctor-rbac.yaml``
    renders the same from `doctor_rules`)."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DOCTOR_ACCOUNT, "namespace": namespace, "labels": dict(labels)},
        }
    ]
    for scope, rules in doctor_rules().by_scope().items():
        objects += _role_objects(DOCTOR_ACCOUNT, scope, rules, namespace, labels)
    return objects
