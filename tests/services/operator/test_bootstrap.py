"""The operator's own RBAC covers what it watches (R-SECURITY): every informer `bootstrap` builds may list
and watch under `rbac.operator_rules()`, in the scope it watches — so a new watch cannot ship without its
permission (it would fail on a real cluster with 403, retrying every second)."""

from __future__ import annotations

from metax_core.cluster import rbac
from metax_k8s.inmemory import InMemoryCluster
from services.operator import bootstrap, settings


def _scope(namespace: str | None, operator_namespace: str) -> rbac.Scope:
    if namespace is None:
        return rbac.Scope.CLUSTER
    if namespace == operator_namespace:
        return rbac.Scope.NAMESPACE
    assert namespace == rbac.EVENTS_NAMESPACE, namespace
    return rbac.Scope.EVENTS


def _allows(rules: tuple[rbac.Rule, ...], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    """Whether ``rules`` allow ``verb``; a rule naming objects allows a list or watch only of one of them by a
    ``metadata.name`` field selector (how the API server authorizes it against resourceNames)."""
    return any(
        r.group == group and resource in r.resources and verb in r.verbs and (not r.names or name in r.names)
        for r in rules
    )


def test_every_informer_of_the_operator_is_allowed_to_list_and_watch_by_its_own_role() -> None:
    s = settings.Settings(identity="op-a", leader_election=False)
    op = bootstrap.bootstrap(s, api=InMemoryCluster().api)
    granted = rbac.operator_rules().by_scope()
    watched = set()
    for informer in op.caches.all:
        group = informer.api_version.rpartition("/")[0]
        kind = informer.kind.lower()  # RuntimeClass → runtimeclasses, NetworkPolicy → networkpolicies
        resource = kind[:-1] + "ies" if kind.endswith("y") else kind + ("es" if kind.endswith("s") else "s")
        scope = _scope(informer.namespace, s.namespace)
        for verb in ("list", "watch"):
            # A namespaced resource watched in one namespace is also allowed by a cluster-wide rule.
            scopes = (scope,) if scope is rbac.Scope.CLUSTER else (scope, rbac.Scope.CLUSTER)
            selector = informer.field_selector or ""
            name = selector.removeprefix("metadata.name=") if selector.startswith("metadata.name=") else None
            assert any(_allows(granted[where], group, resource, verb, name) for where in scopes), (
                verb,
                group,
                resource,
                informer.namespace,
            )
        watched.add((informer.kind, informer.namespace))
    # The components' RBAC is among what is watched, where it lives.
    assert ("ServiceAccount", s.namespace) in watched
    assert ("RoleBinding", rbac.EVENTS_NAMESPACE) in watched
    assert ("ClusterRoleBinding", None) in watched
