"""Differential check (issue 10): the validator (and so the webhook) against the real kube-apiserver holding
the project's own CRD, on a generated set of specs.

The rule: whatever the validator accepts, the API server stores (server-side dry-run apply, strict field
validation), and every object rendered from it the API server creates (DaemonSets, Deployments, the
Service, dry-run in a fresh namespace). The other direction is allowed to differ: where the validator is
deliberately stricter (docs/configuration.md, "Deliberately stricter than the CRD") the spec is counted by
the first error's field and printed, not failed.

The specs are a seeded random mix of the input classes that once disagreed (integers beyond int64 and
bounds, lenient percent strings, trailing newlines, long lists, bad label syntax, affinity shapes and
requirement values, NodePorts, external names, image references, envelope fields) on a valid base, so the
run is the same every time and stays fast (1,000 specs, issue 20's count, about 15 s; rendered objects
deduplicated; ``METAX_DIFFERENTIAL_SPECS`` changes the count). One difference is by design: a NodePort
outside the server's ``--service-node-port-range`` is accepted (clusters set their own range); a real create
of the Service is refused by the API server with the range in its message (a dry run allocates no port).

The last two classes that disagreed (issue 20) are also explicit cases: requirement values against their
operator (the validator refuses what the API server refuses in the rendered DaemonSet, and accepts what it
creates) and an object without ``metadata.name`` (no metadata, or only ``generateName``).
"""

from __future__ import annotations

import collections
import copy
import json
import os
import random
from typing import Any

import pytest

from metax_core.cluster import render_settings, workloads
from metax_core.errors import ClusterError, InvalidSpec
from metax_core.spec import converter, validation
from metax_core.spec import model as spec
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev.controlplane import cluster
from metax_k8s import client, crd
from tests.support.cluster import wait_served

pytestmark = pytest.mark.integration

API = f"{spec.API_GROUP}/{spec.API_VERSION}"
SPECS = int(os.environ.get("METAX_DIFFERENTIAL_SPECS", "1000"))
SEED = 10

PERCENTS = ["50%", " 50%", "050%", "50%\n", "\uff15\uff10%", 0, 7, 100000, 100001, "100%", "101%", -1, 2**63]
DEEP: dict[str, Any] = {}
for _ in range(330):
    DEEP = {"nodeAffinity": DEEP}


def node_affinity(*requirements: dict[str, Any], fields: bool = False) -> dict[str, Any]:
    term = {"matchFields" if fields else "matchExpressions": list(requirements)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod_anti_affinity(*requirements: dict[str, Any]) -> dict[str, Any]:
    term = {"labelSelector": {"matchExpressions": list(requirements)}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pod_term(**fields: Any) -> dict[str, Any]:
    term = {"topologyKey": "kubernetes.io/hostname", **fields}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


VALID_AFFINITY = node_affinity({"key": "zone", "operator": "In", "values": ["a"]})
# Requirement values against their operator: (affinity, refused).
REQUIREMENTS: list[tuple[dict[str, Any], bool]] = [
    (node_affinity({"key": "zone", "operator": "In"}), True),
    (node_affinity({"key": "zone", "operator": "NotIn", "values": []}), True),
    (node_affinity({"key": "zone", "operator": "Exists", "values": ["a"]}), True),
    (node_affinity({"key": "zone", "operator": "DoesNotExist", "values": ["a"]}), True),
    (node_affinity({"key": "gpus", "operator": "Gt"}), True),
    (node_affinity({"key": "gpus", "operator": "Lt", "values": ["1", "2"]}), True),
    (node_affinity({"key": "zone", "operator": "In", "values": ["a b"]}), True),
    (node_affinity({"key": "zone", "operator": "In", "values": ["a"]}, fields=True), True),
    (node_affinity({"key": "metadata.name", "operator": "In", "values": ["a", "b"]}, fields=True), True),
    (node_affinity({"key": "metadata.name", "operator": "Exists"}, fields=True), True),
    (pod_anti_affinity({"key": "app", "operator": "In"}), True),
    (pod_anti_affinity({"key": "app", "operator": "Exists", "values": ["x"]}), True),
    (pod_anti_affinity({"key": "app", "operator": "In", "values": ["not valid"]}), True),
    (node_affinity({"key": "zone", "operator": "In", "values": ["a", "b"]}), False),
    (
        node_affinity({"key": "zone", "operator": "Exists"}, {"key": "x", "operator": "DoesNotExist", "values": []}),
        False,
    ),
    (node_affinity({"key": "gpus", "operator": "Gt", "values": ["3"]}), False),
    (node_affinity({"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}, fields=True), False),
    (pod_anti_affinity({"key": "app", "operator": "NotIn", "values": ["x"]}), False),
    # The rest of a pod affinity term: namespaces are DNS labels; matchLabelKeys need a labelSelector.
    (pod_term(namespaces=["a.b"]), True),
    (pod_term(matchLabelKeys=["app"]), True),
    (pod_term(labelSelector={"matchLabels": {"a": "x"}}, matchLabelKeys=["v"], mismatchLabelKeys=["v"]), True),
    (pod_term(namespaces=["gpu-jobs"], labelSelector={"matchLabels": {"a": "x"}}, matchLabelKeys=["v"]), False),
]
CANDIDATES: dict[tuple[str, ...], list[Any]] = {
    ("registry",): ["", "reg.example.com/metax", "reg.example.com:5000", "REG.example.com", "reg.io/", "https://r"],
    ("imagePullSecrets",): [["pull"], ["Bad_Name"], ["pull"] * 65],
    ("gpuDevice", "healthyInterval"): [0, 5, 86400, 86401, 2**63 - 1, 2**63, -1, 10**30],
    ("gpuDevice", "sgpuShares"): [1, 1024, 1025, 0],
    ("driver", "upgradePolicy", "maxParallel"): PERCENTS,
    ("driver", "upgradePolicy", "maxUnavailable"): PERCENTS,
    ("driver", "upgradePolicy", "maxFailureThreshold"): [0, 100000, 100001, 2**63],
    ("driver", "upgradePolicy", "upgradeSteps"): [
        [{"replicas": "100%"}],
        [{"replicas": "100%"}] * 100,
        [{"replicas": "100%"}] * 101,
        [{"replicas": 1, "pauseDuration": "10s"}, {"replicas": "100%"}],
        [{"replicas": 1, "pauseDuration": " 10 s "}, {"replicas": "100%"}],
        [{"replicas": 1, "pauseDuration": "10s\n"}, {"replicas": "100%"}],
        [{"replicas": 1, "pauseDuration": 2_592_000_001}, {"replicas": "100%"}],
    ],
    ("driver", "upgradePolicy", "enableRollout"): [True, False],
    ("driver", "payload", "version"): ["2.14.6", "2.14.6\n", "v" * 129, "-bad", "2.14.6-rc1"],
    ("driver", "payload", "name"): ["driver-image", "Driver", "a/b", "x" * 256],
    ("driver", "payload", "registry"): ["drivers.example.com", "https://x", "reg.io/"],
    ("maca", "payload", "images"): [
        ["maca:2.18.0.3"],
        ["maca:2.18.0.3\n"],
        ["MACA:2.18.0.3"],
        ["maca:2.18.0.3"] * 65,
        ["reg.io:5000/p/maca-c500:2.18.0.3-ubuntu"],
    ],
    ("vfioManager", "vfioConfig"): [
        *(
            [{"nodeName": "gpu-[0-9]+", "gpus": g}]
            for g in ("0,1", "all", "ALL", [0, 1], ["all"], " 0 , 1 ", "0,\u30001", 1, 0, True)
        ),
        [{"nodeName": "(a+)+$", "gpus": "all"}],
        [{"nodeName": "(?=a)", "gpus": "all"}],
        [{"nodeName": "n", "gpus": "0"}] * 257,
    ],
    ("exporter", "deploy"): [True],
    ("exporter", "service"): [
        {"type": "NodePort", "port": 30400},
        {"type": "NodePort", "port": 80},
        {"type": "NodePort", "port": 40000},
        {"type": "LoadBalancer", "port": 80},
        {"type": "ExternalName", "externalName": "metrics.example.com"},
        {"type": "ExternalName", "externalName": "not a name"},
    ],
    ("tolerations",): [
        [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        [{"key": "bad key", "operator": "Exists"}],
        [{"key": "k", "value": "v" * 64}],
        [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**40}],
        [{"key": "gpu", "operator": "Exists"}] * 65,
    ],
    ("podTemplateSpec", "spec", "nodeSelector"): [{"zone": "a"}, {"bad key": "a"}, {"zone": "a b"}, {"z": "v" * 64}],
    ("podTemplateSpec", "spec", "affinity"): [
        VALID_AFFINITY,
        {"nodeAfinity": {}},
        {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0}]}},
        DEEP,
        *(affinity for affinity, _ in REQUIREMENTS),
    ],
    ("maca", "podTemplateSpec", "spec", "tolerations"): [[{"key": "example.com/gpu", "operator": "Exists"}]],
    # R-DRA: its DaemonSet and DeviceClasses, and gpu-device's allocation affinity ANDed into the global one
    ("draDriver",): [{"deploy": True}, {"deploy": True, "defaultAllocation": "dra"}, {"defaultAllocation": "DRA"}],
}
ENVELOPES: list[dict[str, Any]] = [
    {},
    {"extra": 1},
    {"metadata": {"name": spec.OBJECT_NAME, "labels": {"bad key": "x"}}},
    {"metadata": {"name": spec.OBJECT_NAME, "labels": {"team": "gpu"}}},
]


def _base() -> dict[str, Any]:
    return {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.32.0"}}}


def _set(document: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        document = document.setdefault(key, {})
    document[path[-1]] = copy.deepcopy(value)


def generated_objects() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    paths = sorted(CANDIDATES)
    objects = []
    for _ in range(SPECS):
        body = _base()
        for path in rng.sample(paths, rng.randint(1, 2)):
            _set(body, path, rng.choice(CANDIDATES[path]))
        obj = {"apiVersion": API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": body}
        obj.update(copy.deepcopy(rng.choice(ENVELOPES)))
        objects.append(obj)
    return objects


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    http = client.HttpApi(client.api_client(control_plane.kubeconfig_path))
    http.apply(crd.crd(), field_manager="differential", force=True)
    wait_served(http, API, spec.KIND)
    return http


def _server_refusal(api: client.HttpApi, obj: dict[str, Any]) -> str | None:
    try:
        api.apply(obj, field_manager="differential", force=True, dry_run=True)
    except ClusterError as exc:
        return exc.detail
    return None


NODE_PORT_RANGE = (30000, 32767)
"""The test control plane's --service-node-port-range (the API server's default)."""


def _outside_the_node_port_range(manifest: dict[str, Any]) -> bool:
    ports = manifest.get("spec", {}).get("ports", []) if manifest["kind"] == "Service" else []
    low, high = NODE_PORT_RANGE
    return any("nodePort" in p and not low <= p["nodePort"] <= high for p in ports)


def test_whatever_the_validator_accepts_the_api_server_stores_and_creates(
    api: client.HttpApi, kube_namespace: str
) -> None:
    objects = generated_objects()
    disagreements: list[str] = []
    stricter: collections.Counter[str] = collections.Counter()
    rendered: dict[str, dict[str, Any]] = {}
    valid = both_refuse = 0
    for obj in objects:
        try:
            parsed = validation.parse(obj)
        except InvalidSpec as exc:
            if _server_refusal(api, obj) is None:
                field = exc.errors[0].path.split("[", 1)[0] or "(root)"
                stricter[f"{field}: {exc.errors[0].message[:60]}"] += 1
            else:
                both_refuse += 1
            continue
        valid += 1
        refusal = _server_refusal(api, obj)
        if refusal is not None:
            disagreements.append(f"CR {json.dumps(obj['spec'])[:300]}: {refusal}")
        settings = render_settings.RenderSettings(namespace=kube_namespace)
        for manifest in workloads.render(parsed, settings).objects:
            rendered.setdefault(json.dumps(manifest, sort_keys=True), dict(manifest))
    for manifest in rendered.values():
        refusal = _server_refusal(api, manifest)
        if refusal is not None:
            disagreements.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {refusal}")
    node_ports = sum(_outside_the_node_port_range(m) for m in rendered.values())
    print(
        f"\ndifferential: {len(objects)} specs, {valid} valid (all stored: {not disagreements}), "
        f"{both_refuse} refused by both, {sum(stricter.values())} refused only by the validator; "
        f"{len(rendered)} distinct rendered objects dry-run created ({node_ports} NodePort Services outside "
        "the server's default range: a dry run allocates no port, see the NodePort test)"
    )
    for reason, count in stricter.most_common():
        print(f"  stricter {count:4d}  {reason}")
    assert valid >= SPECS // 10 and stricter, "the generated set must exercise both sides"
    assert disagreements == []


def _daemonsets(body: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The DaemonSets rendered from ``body`` without validation (what the operator would apply if it let it by)."""
    parsed = converter.structure(body, spec.ClusterOperatorSpec)
    settings = render_settings.RenderSettings(namespace=namespace)
    return [dict(o) for o in workloads.render(parsed, settings).objects if o["kind"] == "DaemonSet"]


@pytest.mark.parametrize(("affinity", "refused"), REQUIREMENTS, ids=lambda v: json.dumps(v)[:80])
def test_requirement_values_are_refused_exactly_where_the_api_server_refuses_the_daemonset(
    api: client.HttpApi, kube_namespace: str, affinity: dict[str, Any], refused: bool
) -> None:
    """Issue 20: ``In`` without values (and the like) passed the validator and broke every DaemonSet."""
    body = {**_base(), "gpuLabel": {"podTemplateSpec": {"spec": {"affinity": affinity}}}}
    (daemonset,) = [d for d in _daemonsets(body, kube_namespace) if d["metadata"]["name"] == "metax-gpu-label"]
    server = _server_refusal(api, daemonset)
    if refused:
        with pytest.raises(InvalidSpec) as caught:
            validation.parse(body)
        (error,) = caught.value.errors
        assert error.path.startswith("gpuLabel.podTemplateSpec.spec.affinity."), error
        assert server is not None and "spec.template.spec.affinity" in server, server
    else:
        validation.parse(body)
        assert server is None


def _create_dry_run(api: client.HttpApi, obj: dict[str, Any]) -> str | None:
    """A POST as kubectl create sends it; `HttpApi.create` itself refuses a nameless object before asking."""
    try:
        api._send(
            "POST",
            api.resource(API, spec.KIND).path(),
            verb="create",
            what=spec.KIND,
            query={"dryRun": "All", "fieldValidation": "Strict"},
            body=obj,
        )
    except ClusterError as exc:
        return exc.detail
    return None


@pytest.mark.parametrize("metadata", [None, {}, {"generateName": "cluster-operator-"}, {"labels": {"team": "gpu"}}])
def test_an_object_without_its_name_is_refused_by_both(api: client.HttpApi, metadata: dict[str, Any] | None) -> None:
    """Issue 20: no metadata, or only a generateName (the server makes another name), was accepted."""
    obj: dict[str, Any] = {"apiVersion": API, "kind": spec.KIND, "spec": _base()}
    if metadata is not None:
        obj["metadata"] = metadata
    with pytest.raises(InvalidSpec) as caught:
        validation.parse(obj)
    assert [str(e) for e in caught.value.errors] == [
        "metadata.name: is required and must be 'cluster-operator': the operator reconciles only that object"
    ]
    refusal = _create_dry_run(api, obj)
    assert refusal is not None
    assert "name or generateName is required" in refusal or "metadata.name must be cluster-operator" in refusal
    named = _create_dry_run(api, {**obj, "metadata": {**(metadata or {}), "name": spec.OBJECT_NAME}})
    assert named is None or "already exists" in named


@pytest.mark.parametrize(("port", "in_range"), [(30400, True), (32767, True), (80, False), (40000, False)])
def test_a_node_port_outside_the_server_s_range_is_left_to_the_server(
    api: client.HttpApi, kube_namespace: str, port: int, in_range: bool
) -> None:
    """Issue 20: clusters set --service-node-port-range; the validator accepts 1–65535, the server decides."""
    body = {**_base(), "exporter": {"deploy": True, "service": {"type": "NodePort", "port": port}}}
    obj = {"apiVersion": API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": body}
    parsed = validation.parse(obj)
    assert _server_refusal(api, obj) is None
    settings = render_settings.RenderSettings(namespace=kube_namespace)
    (service,) = [dict(o) for o in workloads.render(parsed, settings).objects if o["kind"] == "Service"]
    assert _outside_the_node_port_range(service) is not in_range
    if in_range:
        assert _server_refusal(api, service) is None
        return
    # A dry run allocates no node port, so the range is only checked by a real create: refused, nothing made.
    assert _server_refusal(api, service) is None
    with pytest.raises(ClusterError, match="provided port is not in the valid range. The range of valid ports is"):
        api.apply(service, field_manager="differential", force=True)
