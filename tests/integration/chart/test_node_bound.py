"""Node-bound agent writes on the real API server (R-NODEBOUND, R-SECURITY), with RBAC on (Node,RBAC).

Installed: every node agent's ServiceAccount with the product's RBAC (`metax_core.cluster.rbac.objects`, what the
operator applies) and the chart's own ``templates/node-policy.yaml`` (``helm template`` for this namespace);
two Nodes A and B; for each agent a Pod bound to A (``spec.nodeName``; nothing runs it) and a token from a
TokenRequest bound to that Pod, as the kubelet mounts it. Then, as each token, one matrix: a ``metax-tech.com/``
label on A is allowed, the same on B refused, a label of someone else on A refused, a taint on A refused;
deleting an Event in ``default`` about B, or about no Node, refused (the agent's own one allowed: the Events
port replaces its Events after the dedup window); for ``metax-dra-driver``, a ResourceSlice of A allowed and one
of B refused. A token bound to no pod (a plain TokenRequest) and a legacy Secret token are refused on A. Every
refusal is asserted with its message, and the matrix is compared whole so that one run shows every cell.

The cluster-scoped objects (ClusterRoles, the policy) and the Roles in ``default`` carry the test namespace in
their names, so they never meet the chart's or the operator's of another test.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import yaml
from kubernetes import client as kube

from metax_core.cluster import node_bound, node_policy, rbac
from metax_core.components import Component
from metax_core.errors import ClusterError, NotFound
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev.controlplane import cluster
from metax_k8s import client
from tests.support.chart import CHART_DIR, Helm
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

AGENTS = node_bound.node_bound().accounts
OURS = "metax-tech.com/node-bound-test"
THEIRS = "example.com/other"
SLICE_API = "resource.k8s.io/v1"
EVENT_API = "events.k8s.io/v1"


def _local(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` renamed with ``namespace`` when it lives outside it (cluster-wide or in ``default``)."""
    meta = obj["metadata"]
    if meta.get("namespace") == namespace or obj["kind"] == "ServiceAccount":
        return obj
    renamed = {**obj, "metadata": {**meta, "name": f"{meta['name']}-{namespace}"}}
    if "roleRef" in obj:
        renamed["roleRef"] = {**obj["roleRef"], "name": f"{obj['roleRef']['name']}-{namespace}"}
    if obj["kind"] == "ValidatingAdmissionPolicyBinding":
        renamed["spec"] = {**obj["spec"], "policyName": f"{obj['spec']['policyName']}-{namespace}"}
    return renamed


def _chart_policy(helm: Helm, namespace: str) -> list[dict[str, Any]]:
    """The chart's policy and binding, rendered by helm for ``namespace`` on this server's version."""
    out = helm.run(
        "template",
        "node-bound",
        str(CHART_DIR),
        "-n",
        namespace,
        "--set",
        f"registry={REGISTRY_EXAMPLE}",
        "--show-only",
        "templates/node-policy.yaml",
    ).stdout
    found = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in found] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return found


def _as(plane: cluster.ControlPlane, token: str) -> client.HttpApi:
    configuration = kube.Configuration(
        host=plane.server_url, ssl_ca_cert=str(plane.ca_path), api_key={"authorization": f"Bearer {token}"}
    )
    return client.HttpApi(kube.ApiClient(configuration), user_agent="node-bound-test")


def _token(core: kube.CoreV1Api, account: str, namespace: str, pod: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    request = kube.AuthenticationV1TokenRequest.model_validate({"spec": spec})
    answer = core.create_namespaced_service_account_token(account, namespace, request)
    assert answer.status is not None and answer.status.token
    return str(answer.status.token)


def _legacy_token(admin: client.HttpApi, account: str, namespace: str) -> str:
    """A long-lived token from a ``kubernetes.io/service-account-token`` Secret (no extra at all)."""
    admin.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{account}-legacy",
                "namespace": namespace,
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            "type": "kubernetes.io/service-account-token",
        }
    )
    secret = wait_for(
        "the legacy token filled in",
        lambda: (admin.get("v1", "Secret", f"{account}-legacy", namespace).get("data") or {}).get("token"),
        timeout=30,
    )
    return base64.b64decode(secret).decode()


def _event(name: str, regarding: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": EVENT_API,
        "kind": "Event",
        "metadata": {"name": name, "namespace": rbac.EVENTS_NAMESPACE},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "metax-tech.com/node-bound-test",
        "reportingInstance": "test",
        "action": "Test",
        "reason": "Test",
        "type": "Normal",
        "note": "about " + regarding["name"],
        "regarding": regarding,
    }


def _slice(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": SLICE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.metax-tech.com",
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [],
        },
    }


@pytest.fixture
def admin(control_plane: cluster.ControlPlane) -> Iterator[client.HttpApi]:
    api_client = client.api_client(control_plane.kubeconfig_path)
    try:
        yield client.HttpApi(api_client, user_agent="node-bound-test-admin")
    finally:
        api_client.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


@attrs.define
class Installed:
    """What the `installed` fixture made, and what the test adds for it to remove."""

    admin: client.HttpApi
    nodes: tuple[str, str]
    policy: str
    events: list[str] = attrs.Factory(list)
    slices: list[str] = attrs.Factory(list)

    def event(self, body: dict[str, Any]) -> str:
        self.admin.create(body)
        self.events.append(body["metadata"]["name"])
        return str(body["metadata"]["name"])


@pytest.fixture
def installed(
    control_plane: cluster.ControlPlane,
    admin: client.HttpApi,
    kube_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Installed]:
    """The agents' RBAC, the chart's policy, Nodes A and B (with labels and annotations that are not ours)."""
    ns = kube_namespace
    helm = Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm-node-bound"))
    made: list[dict[str, Any]] = []
    done: Installed | None = None

    def create(obj: dict[str, Any]) -> None:
        if obj["metadata"].get("namespace") != ns:  # the namespace's own go with it
            made.append(obj)
        admin.create(obj)

    try:
        for obj in (o for c in Component for o in rbac.objects(c, ns)):
            create(_local(obj, ns))
        policy = [_local(o, ns) for o in _chart_policy(helm, ns)]
        for obj in policy:
            create(obj)
        nodes = (f"nb-a-{ns}", f"nb-b-{ns}")
        for node in nodes:
            # A busy node's metadata, so the CEL's cost is a real one: many labels, a large annotation (HAMi's
            # device list on an 8-GPU node is a few kB; this is 64 kB).
            labels = {THEIRS: "x", "metax-tech.com/gpu.present": "true"}
            labels |= {f"example.com/label-{i}": str(i) for i in range(40)}
            annotations = {"example.com/note": "kept", "example.com/large": "x" * 65536}
            create(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": node, "labels": labels, "annotations": annotations},
                }
            )
        done = Installed(admin, nodes, policy[0]["metadata"]["name"])
        yield done
    finally:
        gone = (
            []
            if done is None
            else [
                *((EVENT_API, "Event", n + s, rbac.EVENTS_NAMESPACE) for n in done.events for s in ("", "-new")),
                *((SLICE_API, "ResourceSlice", n, None) for n in done.slices),
            ]
        )
        gone += [(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in made]
        for api_version, kind, name, namespace in reversed(gone):
            with contextlib.suppress(NotFound):
                admin.delete(api_version, kind, name, namespace)


def _outcome(call: Callable[[], object]) -> str:
    """ "allowed", or "refused (status): message" (an admission policy's message from the policy's name on)."""
    try:
        call()
    except ClusterError as exc:
        policy = exc.detail.find("ValidatingAdmissionPolicy ")
        return f"refused ({exc.status}): {exc.detail[policy:] if policy >= 0 else exc.detail}"
    return "allowed"


def _label(api: client.HttpApi, node: str, key: str, value: str, *, dry_run: bool = False) -> object:
    if dry_run:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {key: value}}}
        return api.apply(body, field_manager="node-bound-test", dry_run=True)
    return api.merge_patch("v1", "Node", node, {"metadata": {"labels": {key: value}}}, field_manager="node-bound-test")


Cells = dict[str, tuple[Callable[[], object], str]]


def _cells(account: str, api: client.HttpApi, a: str, b: str, events: dict[str, str], slices: list[str]) -> Cells:
    """What ``account``'s token (bound to a pod on node ``a``) tries, with the outcome R-NODEBOUND wants."""
    own_keys = f"{account} may change only its own node {a}'s metax-tech.com/ labels and annotations, not "
    spec = own_keys + "its spec (taints, unschedulable, podCIDR, ...)"
    other_events = f"{account} may delete only Events in default about its own node {a}, not "
    new_event = _event(f"{events['b']}-new", {"apiVersion": "v1", "kind": "Node", "name": b})
    cells: Cells = {
        "our label on A": (lambda: _label(api, a, OURS, account), "allowed"),
        "our label on B": (
            lambda: _label(api, b, OURS, account),
            f"{account} may change only its own node {a}, not {b}",
        ),
        "their label on A": (lambda: _label(api, a, THEIRS, account), own_keys + f"the label(s) {THEIRS}"),
        "a taint on A": (
            lambda: api.merge_patch("v1", "Node", a, {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            spec,
        ),
        "cordon A": (lambda: api.merge_patch("v1", "Node", a, {"spec": {"unschedulable": True}}), spec),
        "delete an Event about B": (
            lambda: api.delete(EVENT_API, "Event", events["b"], rbac.EVENTS_NAMESPACE),
            other_events + f"{events['b']} about Node {b}",
        ),
        "delete an Event about a Pod": (
            lambda: api.delete(EVENT_API, "Event", events["pod"], rbac.EVENTS_NAMESPACE),
            other_events + f"{events['pod']} about Pod p",
        ),
        "create an Event about B": (
            lambda: api.create(new_event),
            f"{account} may write only Events in default about its own node {a}, "
            f"not {new_event['metadata']['name']} about Node {b}",
        ),
        "delete its own Event": (
            lambda: api.delete(EVENT_API, "Event", events["own"], rbac.EVENTS_NAMESPACE),
            "allowed",
        ),
    }
    if account in node_bound.node_bound().resource_slices:
        mine, theirs = _slice(f"{slices[0]}", a), _slice(f"{slices[1]}", b)
        cells["a ResourceSlice of A"] = (lambda: api.create(mine), "allowed")
        cells["a ResourceSlice of B"] = (
            lambda: api.create(theirs),
            f"{account} may write only the ResourceSlices of its own node {a} (spec.nodeName), "
            f"not {slices[1]} of node {b}",
        )
    return cells


def test_agent_tokens_change_only_their_own_node_and_our_keys(
    control_plane: cluster.ControlPlane,
    admin: client.HttpApi,
    kube_namespace: str,
    installed: Installed,
    record_timing: Callable[[str, float], None],
) -> None:
    """R-NODEBOUND, R-SECURITY: the matrix, for every node agent's pod-bound token, and a token bound to nothing."""
    ns = kube_namespace
    a, b = installed.nodes
    core = kube.CoreV1Api(admin.client)
    began = time.monotonic()
    pods = {
        account: admin.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": account, "namespace": ns},
                "spec": {
                    "nodeName": a,
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:none"}],
                },
            }
        )
        for account in AGENTS
    }
    tokens = {account: _as(control_plane, _token(core, account, ns, pods[account])) for account in AGENTS}
    unbound = _as(control_plane, _token(core, "metax-driver", ns, None))
    legacy = _as(control_plane, _legacy_token(admin, "metax-driver", ns))

    # The roles and the policy are enforced once the API server's informers have them: wait for both.
    driver = tokens["metax-driver"]
    wait_for("the agents' RBAC in force", lambda: _label(driver, a, OURS, "wait", dry_run=True), timeout=30)
    wait_for(
        "the node-bound policy in force",
        lambda: "ValidatingAdmissionPolicy" in _outcome(lambda: _label(driver, b, OURS, "wait", dry_run=True)),
        timeout=30,
    )

    policy = installed.policy
    denied = f"refused (403): ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
    found: dict[tuple[str, str], str] = {}
    expected: dict[tuple[str, str], str] = {}
    for account in AGENTS:
        events = {}
        for about, regarding in (
            ("own", {"apiVersion": "v1", "kind": "Node", "name": a}),
            ("b", {"apiVersion": "v1", "kind": "Node", "name": b}),
            ("pod", {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": rbac.EVENTS_NAMESPACE}),
        ):
            events[about] = installed.event(_event(f"nb-{ns}-{account.removeprefix('metax-')}-{about}", regarding))
        slices = [f"nb-{ns}-{account}-a", f"nb-{ns}-{account}-b"]
        installed.slices += slices if account in node_bound.node_bound().resource_slices else []
        for cell, (call, outcome) in _cells(account, tokens[account], a, b, events, slices).items():
            found[(account, cell)] = _outcome(call)
            expected[(account, cell)] = outcome if outcome == "allowed" else denied + outcome
    for token, api in (("token bound to no pod", unbound), ("legacy Secret token", legacy)):
        found[(token, "our label on A")] = _outcome(functools.partial(_label, api, a, OURS, "x"))
        expected[(token, "our label on A")] = (
            f"{denied}metax-driver's token is bound to no node (no {node_policy.NODE_NAME_EXTRA}: a legacy token, or "
            f"a TokenRequest bound to no pod or node): it may not write nodes ({node_policy.POLICY_NAME})"
        )
    assert found == expected
    # Only our key changed on A (by the last agent), nothing on B.
    node_a, node_b = admin.get("v1", "Node", a), admin.get("v1", "Node", b)
    assert node_a["metadata"]["labels"][OURS] == AGENTS[-1] and node_a["metadata"]["labels"][THEIRS] == "x"
    assert "taints" not in node_a["spec"] and not node_a["spec"].get("unschedulable")
    assert OURS not in node_b["metadata"]["labels"]
    record_timing(f"node-bound matrix: {len(found)} cells, {len(AGENTS)} agents", time.monotonic() - began)


def test_helm_renders_no_policy_below_the_gate(
    control_plane: cluster.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """R-NODEBOUND, R-COMPAT: below Kubernetes 1.30 the chart has no policy (the real 1.23 install, with its
    NOTES, is tests/integration/operator/test_oldest_kubernetes.py)."""
    helm = Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm-gate"))
    major, minor = node_policy.MINIMUM_KUBERNETES
    for version, count in ((f"{major}.{minor - 1}.9", 0), (f"{major}.{minor}.0", 2)):
        out = helm.run(
            "template",
            "r",
            str(CHART_DIR),
            "-n",
            "ns",
            "--kube-version",
            version,
            "--set",
            f"registry={REGISTRY_EXAMPLE}",
        ).stdout
        kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
        assert sum(k.startswith("ValidatingAdmissionPolicy") for k in kinds) == count, version
