"""The node-bound admission policy is rendered from the RBAC model (R-NODEBOUND, R-SECURITY).

Aspects: the policy matches exactly the users of the agent ServiceAccounts that may write Nodes or ResourceSlices
(the issue's eight), in the release's namespace, and no other account of the model; its resource rules are the
writes their RBAC grants (Nodes: UPDATE, which a patch arrives as; ResourceSlices: CREATE, UPDATE, DELETE; Events:
CREATE, UPDATE, DELETE, in ``default`` only); it fails closed (``failurePolicy: Fail``, binding ``Deny``) and has a
refusal for each case, guarded by the resource and null-safe; adding a node-writing account to the model adds it
to the match (no drift), a read-only one does not, and a write the policy cannot bind makes the render fail; the
chart ships the same objects behind the Kubernetes gate, and its NOTES say what happens below it. The CEL itself
runs on a real API server in tests/integration/chart/test_node_bound.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from metax_core.cluster import node_bound, node_policy, rbac
from metax_dev import chart

CHART = Path(__file__).resolve().parents[2] / "charts" / "metax-operator"
NAMESPACE = "gpu-ops"
AGENTS = (
    "metax-gpu-label",
    "metax-container-runtime",
    "metax-driver",
    "metax-maca",
    "metax-gpu-device",
    "metax-vfio-manager",
    "metax-topo-worker",
    "metax-dra-driver",
)
"""Issue 38's list: the node agents' accounts that may patch Nodes (a new agent joins them through the model)."""


def _matched_users(policy: dict[str, Any]) -> list[str]:
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    match = re.fullmatch(r"request\.userInfo\.username in \[(.*)\]", conditions["node-agents"])
    assert match, conditions["node-agents"]
    return re.findall(r"'([^']*)'", match.group(1))


def _rules(policy: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    found = {}
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        assert rule["apiVersions"] == ["*"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found[(group, resource)] = rule["operations"]
    return found


def _writes(account: rbac.AccountRules, group: str, resource: str) -> bool:
    return any(
        r.group == group and resource in r.resources and set(r.verbs) & {"create", "update", "patch", "delete"}
        for r in account.cluster
    )


def test_every_node_writing_agent_is_matched_and_no_other_account() -> None:
    """R-NODEBOUND: the users matched are exactly the accounts whose RBAC lets them write Nodes or ResourceSlices
    (the issue's eight among them), in the namespace given, and none of the others."""
    writers = [
        a
        for a, r in rbac.COMPONENT_RULES.items()
        if _writes(r, "", "nodes") or _writes(r, "resource.k8s.io", "resourceslices")
    ]
    assert set(AGENTS) <= set(writers)
    users = _matched_users(node_policy.policy(NAMESPACE))
    assert users == [f"system:serviceaccount:{NAMESPACE}:{a}" for a in writers]
    others = {rbac.OPERATOR_ACCOUNT, rbac.DOCTOR_ACCOUNT, *(set(rbac.COMPONENT_RULES) - set(writers))}
    assert {"metax-topo-master", "metax-gpu-scheduler"} <= others
    assert not any(u.endswith(f":{a}") for u in users for a in others)
    bound = node_bound.node_bound()
    assert bound.accounts == tuple(writers) and set(AGENTS) <= set(bound.nodes)
    assert bound.resource_slices == ("metax-dra-driver",) and set(AGENTS) <= set(bound.events)


def test_resource_rules_are_the_writes_rbac_grants() -> None:
    """R-NODEBOUND, R-SECURITY: Nodes (patch = UPDATE), the DRA driver's ResourceSlices, Events in ``default``."""
    policy = node_policy.policy(NAMESPACE)
    assert _rules(policy) == {
        ("", "nodes"): ["UPDATE"],
        ("events.k8s.io", "events"): ["CREATE", "UPDATE", "DELETE"],
        ("resource.k8s.io", "resourceslices"): ["CREATE", "UPDATE", "DELETE"],
    }
    spec = policy["spec"]
    # Core/v1 Events are the same stored resource: Equivalent sends them through the events.k8s.io rule.
    assert spec["matchConstraints"]["matchPolicy"] == "Equivalent"
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["events-only-in-default"] == (
        "request.resource.resource != 'events' || request.namespace == 'default'"
    )
    assert spec["failurePolicy"] == "Fail"
    binding = node_policy.binding()
    assert binding["spec"] == {"policyName": node_policy.POLICY_NAME, "validationActions": ["Deny"]}
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"


def test_each_refusal_is_guarded_null_safe_and_says_what_and_why() -> None:
    """R-NODEBOUND: the node name comes from the token's extra, absent on unbound tokens; labels, annotations,
    finalizers, owner references and spec.nodeName are read behind has(); each message names the account."""
    spec = node_policy.policy(NAMESPACE)["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["node"].startswith(
        f"has(request.userInfo.extra) && '{node_policy.NODE_NAME_EXTRA}' in request.userInfo.extra"
    )
    for name in ("newLabels", "oldLabels", "newAnnotations", "oldAnnotations"):
        assert variables[name].startswith("has("), name
    assert "'metax-tech.com/'" in variables["labelChanges"] and "'metax-tech.com/'" in variables["annotationChanges"]
    assert "object != null" in variables["newSliceNode"] and "oldObject != null" in variables["oldSliceNode"]
    validations = spec["validations"]
    assert validations[0]["expression"] == "variables.node != ''"
    guards = {"!variables.isNode": 6, "!variables.isSlice": 1, "!variables.isEvent": 1}
    for guard, count in guards.items():
        assert sum(v["expression"].startswith(guard) for v in validations) == count, guard
    for validation in validations:
        assert validation["messageExpression"].startswith("variables.account + ")
        assert validation["reason"] == "Forbidden"
        assert "metadata.labels" not in validation["expression"]  # only through the null-safe variables
    messages = " ".join(v["messageExpression"] for v in validations)
    for text in ("'s metax-tech.com/ labels and annotations, not ", "its spec (taints", "bound to no node"):
        assert text in messages


def test_a_new_node_writing_account_is_matched_without_touching_the_policy() -> None:
    """R-NODEBOUND (no drift): the match follows COMPONENT_RULES; a read-only account stays out; a write the
    policy cannot bind to a node fails the render instead of shipping unbound."""
    events = rbac.COMPONENT_RULES["metax-driver"].events
    new_agent = rbac.AccountRules(
        "metax-new-agent", cluster=(rbac.Rule("", ("nodes",), ("get", "patch")),), events=events
    )
    reader = rbac.AccountRules("metax-new-reader", cluster=(rbac.Rule("", ("nodes",), rbac.READ),))
    rules = {**rbac.COMPONENT_RULES, new_agent.account: new_agent, reader.account: reader}
    before = _matched_users(node_policy.policy(NAMESPACE))
    after = _matched_users(node_policy.policy(NAMESPACE, rules=rules))
    assert after == [*before, f"system:serviceaccount:{NAMESPACE}:metax-new-agent"]
    assert node_bound.node_bound(rules).events[-1] == "metax-new-agent"

    # A node agent that may also create nodes: the operation is matched, and the policy refuses it.
    creator = rbac.AccountRules("metax-new-agent", cluster=(rbac.Rule("", ("nodes",), ("create", "patch")),))
    policy = node_policy.policy(NAMESPACE, rules={**rbac.COMPONENT_RULES, creator.account: creator})
    assert _rules(policy)[("", "nodes")] == ["CREATE", "UPDATE"]

    for unbound in (
        rbac.Rule("", ("pods",), ("delete",)),
        rbac.Rule("", ("nodes/status",), ("patch",)),
        rbac.Rule("", ("configmaps",), ("patch",)),
    ):
        widened = _with_cluster_rule(rbac.COMPONENT_RULES["metax-driver"], unbound)
        with pytest.raises(node_bound.UnboundWrite, match=r"metax-driver may .* cannot bind"):
            node_policy.policy(NAMESPACE, rules={**rbac.COMPONENT_RULES, "metax-driver": widened})


def _with_cluster_rule(account: rbac.AccountRules, rule: rbac.Rule) -> rbac.AccountRules:
    return rbac.AccountRules(
        account.account, cluster=(*account.cluster, rule), namespace=account.namespace, events=account.events
    )


def test_the_chart_ships_the_policy_behind_the_kubernetes_gate() -> None:
    """R-NODEBOUND, R-COMPAT: templates/node-policy.yaml is the module's objects for the release namespace, from
    Kubernetes 1.30 on (the node-name extra's default-on minor, and ValidatingAdmissionPolicy v1's); NOTES.txt says
    plainly below it that agent writes are not node-bound."""
    assert node_policy.MINIMUM_KUBERNETES == (1, 30)
    text = (CHART / "templates" / "node-policy.yaml").read_text()
    assert text == chart.render_node_policy()
    gate = f'{{{{- if semverCompare "{node_policy.HELM_GATE}" .Capabilities.KubeVersion.Version }}}}\n'
    assert gate in text and text.rstrip().endswith("{{- end }}")
    body = text.split(gate, 1)[1].rsplit("{{- end }}", 1)[0].replace("{{ .Release.Namespace }}", NAMESPACE)
    body = re.sub(r"  labels:\n    \{\{- include .*\n", "", body)
    shipped = list(yaml.safe_load_all(body))
    expected = node_policy.objects(NAMESPACE)
    for obj in expected:
        del obj["metadata"]["labels"]
    assert shipped == expected
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    below = notes.split('{{- if semverCompare "<1.30-0" .Capabilities.KubeVersion.Version }}\n\nWARNING: ', 1)
    assert len(below) == 2, "NOTES.txt says nothing below the gate"
    assert "NOT node-bound" in below[1].split("{{- end }}")[0]
    assert node_policy.POLICY_NAME in below[1].split("{{- end }}")[0]


def test_the_chart_readme_says_what_the_policy_binds() -> None:
    """R-NODEBOUND: the permissions section of the generated chart README names the policy and every account."""
    readme = (CHART / "README.md").read_text()
    section = chart.node_policy_text()
    assert section in readme
    flat = " ".join(section.split())
    assert node_policy.POLICY_NAME in flat and "Below 1.30" in flat
    for account in AGENTS:
        assert f"`{account}`" in flat
