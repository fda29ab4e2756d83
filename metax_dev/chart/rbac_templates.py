"""templates/operator-rbac.yaml and templates/doctor-rbac.yaml: the operator's and the doctor's accounts,
roles and bindings, from `metax_core.cluster.rbac`; templates/node-policy.yaml: the admission policy that binds
the node agents' writes to their own node, from `metax_core.cluster.node_policy`."""

from __future__ import annotations

from typing import Any

import yaml

from metax_core.cluster import node_policy, rbac
from metax_dev.chart.options import GENERATED

# --- templates/operator-rbac.yaml -------------------------------------------------------------------------


def render_operator_rbac() -> str:
    """The operator's ClusterRole, Roles and bindings, from `metax_core.cluster.rbac.operator_rules`."""
    rules = rbac.operator_rules()
    name = rbac.OPERATOR_ACCOUNT
    labels = '    {{- include "metax-operator.labels" . | nindent 4 }}'
    subject = "subjects:\n  - kind: ServiceAccount\n    name: " + name + "\n    namespace: {{ .Release.Namespace }}\n"

    def rule_lines(items: tuple[rbac.Rule, ...]) -> str:
        return yaml.safe_dump({"rules": [r.manifest() for r in items]}, sort_keys=False, width=200)

    docs = []
    for kind, namespace, items in (
        ("ClusterRole", None, rules.cluster),
        ("Role", "{{ .Release.Namespace }}", rules.namespace),
        ("Role", rbac.EVENTS_NAMESPACE, rules.events),
    ):
        role_name = name if namespace != rbac.EVENTS_NAMESPACE else f"{name}-events"
        meta = f"metadata:\n  name: {role_name}\n" + (f"  namespace: {namespace}\n" if namespace else "")
        meta += "  labels:\n" + labels + "\n"
        docs.append(f"apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\n{meta}{rule_lines(items)}")
        docs.append(
            f"apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}Binding\n{meta}"
            f"roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {kind}\n  name: {role_name}\n{subject}"
        )
    return f"# {GENERATED}\n# Source: metax_core/cluster/rbac.py operator_rules().\n" + "---\n".join(docs)


# --- templates/doctor-rbac.yaml ---------------------------------------------------------------------------


def render_doctor_rbac() -> str:
    """The doctor's read-only account and roles (`metax_core.cluster.rbac.doctor_rules`), when
    ``operator.doctor.enabled``; bound to its ServiceAccount and to ``operator.doctor.subjects``."""
    rules = rbac.doctor_rules()
    name = rbac.DOCTOR_ACCOUNT
    labels = '    {{- include "metax-operator.labels" . | nindent 4 }}'
    subjects = (
        "subjects:\n  - kind: ServiceAccount\n    name: " + name + "\n    namespace: {{ .Release.Namespace }}\n"
        "  {{- with .Values.operator.doctor.subjects }}\n  {{- toYaml . | nindent 2 }}\n  {{- end }}\n"
    )
    docs = [
        f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {{{{ .Release.Namespace }}}}\n"
        f"  labels:\n{labels}\n"
    ]
    for scope, items in rules.by_scope().items():
        kind = "ClusterRole" if scope is rbac.Scope.CLUSTER else "Role"
        namespace = {rbac.Scope.CLUSTER: None, rbac.Scope.NAMESPACE: "{{ .Release.Namespace }}"}.get(
            scope, rbac.EVENTS_NAMESPACE
        )
        role_name = rbac.role_name(name, scope)
        meta = f"metadata:\n  name: {role_name}\n" + (f"  namespace: {namespace}\n" if namespace else "")
        meta += "  labels:\n" + labels + "\n"
        rule_lines = yaml.safe_dump({"rules": [r.manifest() for r in items]}, sort_keys=False, width=200)
        docs.append(f"apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\n{meta}{rule_lines}")
        docs.append(
            f"apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}Binding\n{meta}"
            f"roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {kind}\n  name: {role_name}\n{subjects}"
        )
    body = "---\n".join(docs)
    return (
        f"# {GENERATED}\n# Source: metax_core/cluster/rbac.py doctor_rules().\n"
        f"{{{{- if .Values.operator.doctor.enabled }}}}\n{body}{{{{- end }}}}\n"
    )


# --- templates/node-policy.yaml ---------------------------------------------------------------------------


class _Literal(str):
    """A CEL expression, written as a YAML literal block (no quoting to read through)."""


class _TemplateDumper(yaml.SafeDumper):
    pass


_TemplateDumper.add_representer(
    _Literal, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
)


def _literals(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _Literal(v) if k in ("expression", "messageExpression") else _literals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literals(v) for v in value]
    return value


def render_node_policy() -> str:
    """The ValidatingAdmissionPolicy and its binding that bind the node agents' writes to their own node
    (R-NODEBOUND, `metax_core.cluster.node_policy`), for the release's namespace; rendered only on Kubernetes
    `node_policy.MINIMUM_KUBERNETES` and later (templates/NOTES.txt says what that means below it)."""
    namespace = "{{ .Release.Namespace }}"
    labels = '  labels:\n    {{- include "metax-operator.labels" . | nindent 4 }}\n'
    docs = []
    for obj in node_policy.objects(namespace):
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        text = yaml.dump(_literals(body), Dumper=_TemplateDumper, sort_keys=False, width=120)
        # Helm reads {{ … }} as its own: only the namespace may be templated.
        if text.replace(namespace, "").count("{{") or text.replace(namespace, "").count("}}"):
            raise ValueError(f"{obj['kind']} {obj['metadata']['name']}: an expression holds '{{{{' or '}}}}'")
        docs.append(
            f"apiVersion: {obj['apiVersion']}\nkind: {obj['kind']}\nmetadata:\n  name: {obj['metadata']['name']}\n"
            f"{labels}{text}"
        )
    return (
        f"# {GENERATED}\n# Source: metax_core/cluster/node_policy.py objects().\n"
        "# R-NODEBOUND: a node agent's token changes only its own node's objects and our keys (docs/security.md).\n"
        "# Older clusters get no policy, and templates/NOTES.txt says that agent writes are not node-bound there.\n"
        f'{{{{- if semverCompare "{node_policy.HELM_GATE}" .Capabilities.KubeVersion.Version }}}}\n'
        + "---\n".join(docs)
        + "{{- end }}\n"
    )
