"""Node-bound agent writes: the ValidatingAdmissionPolicy that lets a node agent's token change only its own
node's objects, and only our keys (R-NODEBOUND, R-SECURITY).

Why it exists: RBAC cannot name "the node this pod runs on". Every node agent's ServiceAccount may therefore
patch every Node and write Events in ``default`` (`metax_core.cluster.rbac`), and the agents run privileged, so
code execution in one agent on one GPU node would yield a token that can untaint the control plane, cordon the
fleet or relabel any node. Since Kubernetes 1.30 a token bound to a pod carries the pod's node in the request's
user info (``extra["authentication.kubernetes.io/node-name"]``, feature ``ServiceAccountTokenPodNodeInfo``:
alpha 1.29, on by default from 1.30, GA 1.32) and ValidatingAdmissionPolicy is GA
(``admissionregistration.k8s.io/v1``), so the API server itself can refuse what RBAC cannot:

* Nodes (a patch arrives as UPDATE): only the token's own Node; only ``metax-tech.com/`` labels and
  annotations may change (every other key the same before and after); its spec (taints, unschedulable,
  podCIDR, ...), finalizers and owner references unchanged.
* ResourceSlices: only slices whose ``spec.nodeName`` is the token's node (DELETE: the slice deleted).
* Events in ``default`` (where Events about Nodes live): only Events about the token's own Node. An agent
  deletes an Event only to replace one of its own after the dedup window (`metax_k8s.events`), and every
  Event an agent emits is about its own Node (`services._agent.publish`), so creating, updating or deleting
  any other is refused.
* A token without a node (a legacy Secret token, a TokenRequest bound to nothing) is refused for all of it.

Which accounts, resources and operations: derived from `rbac.COMPONENT_RULES`, the model that renders the
agents' RBAC, so the two cannot drift apart (`metax_core.cluster.node_bound`). An account is *node-bound* when
it may write Nodes or ResourceSlices; the policy matches exactly those accounts' users, and the operations their
rules grant. A node-bound account granted a write the policy cannot bind to a node (another resource,
cluster-wide or in ``default``) makes `node_bound.node_bound` raise: a new permission needs a decision here
first.

Not bound: the accounts that write no Node (``metax-topo-master`` reports about every node and may replace
its Events in ``default``; ``metax-gpu-scheduler``), and Events outside ``default`` (``metax-dra-driver`` may
create and patch them cluster-wide, for claims; no agent may delete them there). Below Kubernetes 1.30 the
chart installs no policy (`MINIMUM_KUBERNETES`) and the agents' writes are not node-bound: the chart's notes
and docs say so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from metax_core.cluster import node_bound, rbac
from metax_core.wire import meta

API_VERSION: Final = "admissionregistration.k8s.io/v1"
POLICY_NAME: Final = "metax-operator-node-bound"
"""The ValidatingAdmissionPolicy and its binding share this name."""
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"
"""The user-info extra a token bound to a pod (or a node) carries: the name of its node."""
MINIMUM_KUBERNETES: Final = (1, 30)
"""ValidatingAdmissionPolicy v1 (GA) and the node-name extra on by default (ServiceAccountTokenPodNodeInfo beta;
alpha and off in 1.29, GA and locked on from 1.32)."""
HELM_GATE: Final = f">={MINIMUM_KUBERNETES[0]}.{MINIMUM_KUBERNETES[1]}-0"
"""The chart's ``semverCompare`` constraint on ``.Capabilities.KubeVersion.Version``."""
KEY_PREFIX: Final = meta.PREFIX
"""The labels and annotations that are ours (``metax-tech.com/``)."""
EVENTS_NAMESPACE: Final = rbac.EVENTS_NAMESPACE


def username(namespace: str, account: str) -> str:
    """The user a ServiceAccount's token authenticates as."""
    return f"system:serviceaccount:{namespace}:{account}"


def _cel(text: str) -> str:
    return f"'{text}'"


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_cel(i) for i in items) + "]"


# -- the expressions ----------------------------------------------------------------------------------------
# Variables are evaluated lazily (only when an expression reaches them), so the ones that read a Node's or a
# slice's fields are read only behind a guard on the resource. `object` is null on DELETE, `oldObject` on
# CREATE; labels, annotations, finalizers, ownerReferences and spec.nodeName may be absent, hence `has(...)`.

_EXTRA = _cel(NODE_NAME_EXTRA)
_PREFIX = _cel(KEY_PREFIX)


def _map(obj: str, field: str) -> str:
    return f"has({obj}.metadata.{field}) ? {obj}.metadata.{field} : {{}}"


def _list(obj: str, field: str) -> str:
    return f"has({obj}.metadata.{field}) ? {obj}.metadata.{field} : []"


def _foreign_changes(new: str, old: str) -> str:
    """The keys outside our prefix that differ between two maps (added, removed or changed)."""
    return (
        f"{new}.filter(k, !k.startsWith({_PREFIX}) && (!(k in {old}) || {old}[k] != {new}[k]))"
        f" + {old}.filter(k, !k.startsWith({_PREFIX}) && !(k in {new}))"
    )


def _variables() -> list[dict[str, str]]:
    return [
        {"name": "account", "expression": "request.userInfo.username.split(':')[3]"},
        {
            "name": "node",
            "expression": (
                # no extra at all: a legacy Secret token (or a user impersonated without --as-user-extra)
                f"has(request.userInfo.extra) && {_EXTRA} in request.userInfo.extra"
                f" && size(request.userInfo.extra[{_EXTRA}]) == 1"
                f" ? request.userInfo.extra[{_EXTRA}][0] : ''"
            ),
        },
        {
            "name": "isNode",
            "expression": f"request.resource.group == '' && request.resource.resource == {_cel(node_bound.NODES[1])}",
        },
        {
            "name": "isSlice",
            "expression": (
                f"request.resource.group == {_cel(node_bound.RESOURCE_SLICES[0])}"
                f" && request.resource.resource == {_cel(node_bound.RESOURCE_SLICES[1])}"
            ),
        },
        {"name": "isEvent", "expression": "request.resource.resource == 'events'"},
        {"name": "newLabels", "expression": _map("object", "labels")},
        {"name": "oldLabels", "expression": _map("oldObject", "labels")},
        {"name": "newAnnotations", "expression": _map("object", "annotations")},
        {"name": "oldAnnotations", "expression": _map("oldObject", "annotations")},
        {"name": "labelChanges", "expression": _foreign_changes("variables.newLabels", "variables.oldLabels")},
        {
            "name": "annotationChanges",
            "expression": _foreign_changes("variables.newAnnotations", "variables.oldAnnotations"),
        },
        {
            "name": "newSliceNode",
            "expression": "object != null && has(object.spec.nodeName) ? object.spec.nodeName : ''",
        },
        {
            "name": "oldSliceNode",
            "expression": "oldObject != null && has(oldObject.spec.nodeName) ? oldObject.spec.nodeName : ''",
        },
        {
            "name": "refusedSliceNode",
            # the node of the slice a refusal is about: the deleted one, else the new one, else the old one
            "expression": (
                "request.operation == 'DELETE' ? variables.oldSliceNode : (variables.newSliceNode != variables.node"
                " ? variables.newSliceNode : variables.oldSliceNode)"
            ),
        },
        {
            "name": "eventAbout",
            # the Event as it is after the request (CREATE, UPDATE) or the one deleted; kind/name of `regarding`
            "expression": ("(request.operation == 'DELETE' ? oldObject : object).?regarding.orValue({})"),
        },
    ]


def _text(text: str) -> str:
    """A CEL string literal (double-quoted: the messages hold apostrophes)."""
    return json.dumps(text)


def _validation(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "messageExpression": message, "reason": "Forbidden"}


def _validations(bound: node_bound.NodeBound) -> list[dict[str, str]]:
    """Each refusal has its own validation, guarded so that one request fails at most one of them: its message
    says what was refused and why."""
    found = [
        _validation(
            "variables.node != ''",
            "variables.account + "
            + _text(
                f"'s token is bound to no node (no {NODE_NAME_EXTRA}: a legacy token, or a TokenRequest bound to "
                "no pod or node): it may not write "
            )
            + " + request.resource.resource + "
            + _text(f" ({POLICY_NAME})"),
        )
    ]
    if bound.nodes:
        node = "!variables.isNode || variables.node == '' || "
        own = "variables.account + " + _text(" may change only its own node ") + " + variables.node + "
        on_own = node + "request.name != variables.node || "

        def not_ours(what: str) -> str:
            return own + _text(f"'s {KEY_PREFIX} labels and annotations, not {what}")

        found += [
            _validation(
                node + "request.operation == 'UPDATE'",
                "variables.account + "
                + _text(" may not ")
                + " + request.operation.lowerAscii() + "
                + _text(f" Nodes ({POLICY_NAME})"),
            ),
            _validation(node + "request.name == variables.node", own + _text(", not ") + " + request.name"),
            _validation(
                on_own + "size(variables.labelChanges) == 0",
                not_ours("the label(s) ") + " + variables.labelChanges.join(', ')",
            ),
            _validation(
                on_own + "size(variables.annotationChanges) == 0",
                not_ours("the annotation(s) ") + " + variables.annotationChanges.join(', ')",
            ),
            _validation(
                on_own + "object.spec == oldObject.spec", not_ours("its spec (taints, unschedulable, podCIDR, ...)")
            ),
            _validation(
                on_own
                + f"(({_list('object', 'finalizers')}) == ({_list('oldObject', 'finalizers')})"
                + f" && ({_list('object', 'ownerReferences')}) == ({_list('oldObject', 'ownerReferences')}))",
                not_ours("its finalizers or owner references"),
            ),
        ]
    if bound.resource_slices:
        allowed = (
            "request.operation == 'DELETE' ? variables.oldSliceNode == variables.node"
            " : variables.newSliceNode == variables.node"
            " && (request.operation != 'UPDATE' || variables.oldSliceNode == variables.node)"
        )
        found.append(
            _validation(
                f"!variables.isSlice || variables.node == '' || ({allowed})",
                "variables.account + "
                + _text(" may write only the ResourceSlices of its own node ")
                + " + variables.node + "
                + _text(" (spec.nodeName), not ")
                + " + request.name + "
                + _text(" of ")
                + " + (variables.refusedSliceNode == '' ? 'no node' : 'node ' + variables.refusedSliceNode)",
            )
        )
    if bound.events:
        about_own = (
            "variables.eventAbout.?kind.orValue('') == 'Node'"
            " && variables.eventAbout.?name.orValue('') == variables.node"
        )
        was_own = (
            "oldObject.?regarding.?kind.orValue('') == 'Node'"
            " && oldObject.?regarding.?name.orValue('') == variables.node"
        )
        found.append(
            _validation(
                "!variables.isEvent || variables.node == '' || "
                f"({about_own} && (request.operation != 'UPDATE' || ({was_own})))",
                "variables.account + "
                + _text(" may ")
                + " + (request.operation == 'DELETE' ? 'delete' : 'write') + "
                + _text(f" only Events in {EVENTS_NAMESPACE} about its own node ")
                + " + variables.node + "
                + _text(", not ")
                + " + request.name + "
                + _text(" about ")
                + " + (variables.eventAbout.?kind.orValue('') == '' ? 'no object'"
                " : variables.eventAbout.?kind.orValue('') + ' ' + variables.eventAbout.?name.orValue(''))",
            )
        )
    return found


def policy(
    namespace: str,
    *,
    rules: Mapping[str, rbac.AccountRules] = rbac.COMPONENT_RULES,
    name: str = POLICY_NAME,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy for the node-bound accounts of ``rules`` in ``namespace``."""
    bound = node_bound.node_bound(rules)
    resource_rules = [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": list(ops), "resources": [resource]}
        for (group, resource), ops in bound.operations.items()
    ]
    users = _cel_list([username(namespace, a) for a in bound.accounts])
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(labels or _labels())},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"matchPolicy": "Equivalent", "resourceRules": resource_rules},
            # Only the node agents' requests are evaluated at all: everyone else's cost one `in` on a list.
            "matchConditions": [
                {"name": "node-agents", "expression": f"request.userInfo.username in {users}"},
                {
                    "name": f"events-only-in-{EVENTS_NAMESPACE}",
                    "expression": (
                        f"request.resource.resource != 'events' || request.namespace == {_cel(EVENTS_NAMESPACE)}"
                    ),
                },
            ],
            "variables": _variables(),
            "validations": _validations(bound),
        },
    }


def binding(*, name: str = POLICY_NAME, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Its binding: cluster-wide, refusing (``Deny``) what the policy does not allow."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels or _labels())},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def _labels() -> dict[str, str]:
    # Not managed-by the operator (it neither applies nor prunes these): the chart installs them, with its labels.
    return {meta.APP_LABEL: POLICY_NAME, meta.PART_OF_LABEL: meta.PART_OF}


def objects(
    namespace: str,
    *,
    rules: Mapping[str, rbac.AccountRules] = rbac.COMPONENT_RULES,
    name: str = POLICY_NAME,
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The policy, then its binding."""
    return [policy(namespace, rules=rules, name=name, labels=labels), binding(name=name, labels=labels)]
