"""Differential check (issue 10): the validator (and so the webhook) against the real kube-apiserver holding
the project's own CRD, on a generated set of specs.

The rule: whatever the validator accepts, the API server stores (server-side dry-run apply, strict field
validation), and every object rendered from it the API server creates (DaemonSets, Deployments, the
Service, dry-run in a fresh namespace). The other direction is allowed to differ: where the validator is
deliberately stricter (docs/configuration.md, "Deliberately stricter than the CRD") the spec is counted by
the first error's field and printed, not failed.

The specs are a seeded random mix of the input classes that once disagreed (integers beyond int64 and
bounds, lenient percent strings, trailing newlines, long lists, bad label syntax, affinity shapes,
NodePorts, external names, image references, envelope fields) on a valid base, so the run is the same
every time and stays fast (a few hundred specs, rendered objects deduplicated).
"""

from __future__ import annotations

import collections
import copy
import json
import random
from typing import Any

import pytest
from cluster_helpers import wait_served

from metax_core.cluster import workloads
from metax_core.errors import ClusterError, InvalidSpec
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_k8s import client, crd

pytestmark = pytest.mark.integration

API = f"{spec.API_GROUP}/{spec.API_VERSION}"
SPECS = 300
SEED = 10

PERCENTS = ["50%", " 50%", "050%", "50%\n", "\uff15\uff10%", 0, 7, 100000, 100001, "100%", "101%", -1, 2**63]
DEEP: dict[str, Any] = {}
for _ in range(330):
    DEEP = {"nodeAffinity": DEEP}
VALID_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }
    }
}
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
            for g in ("0,1", "all", "ALL", [0, 1], ["all"], " 0 , 1 ", "0,\u30001")
        ),
        [{"nodeName": "(a+)+$", "gpus": "all"}],
        [{"nodeName": "(?=a)", "gpus": "all"}],
        [{"nodeName": "n", "gpus": "0"}] * 257,
    ],
    ("exporter", "deploy"): [True],
    ("exporter", "service"): [
        {"type": "NodePort", "port": 30400},
        {"type": "NodePort", "port": 80},
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
    ],
    ("maca", "podTemplateSpec", "spec", "tolerations"): [[{"key": "example.com/gpu", "operator": "Exists"}]],
}
ENVELOPES: list[dict[str, Any]] = [
    {},
    {"extra": 1},
    {"metadata": {"name": spec.OBJECT_NAME, "labels": {"bad key": "x"}}},
    {"metadata": {"name": spec.OBJECT_NAME, "labels": {"team": "gpu"}}},
]


def _base() -> dict[str, Any]:
    return {"driver": {"payload": {"version": "2.32.0"}}}


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
        settings = workloads.RenderSettings(namespace=kube_namespace)
        for manifest in workloads.render(parsed, settings).objects:
            rendered.setdefault(json.dumps(manifest, sort_keys=True), dict(manifest))
    for manifest in rendered.values():
        refusal = _server_refusal(api, manifest)
        if refusal is not None:
            disagreements.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {refusal}")
    print(
        f"\ndifferential: {len(objects)} specs, {valid} valid (all stored: {not disagreements}), "
        f"{both_refuse} refused by both, {sum(stricter.values())} refused only by the validator; "
        f"{len(rendered)} distinct rendered objects dry-run created"
    )
    for reason, count in stricter.most_common():
        print(f"  stricter {count:4d}  {reason}")
    assert valid >= SPECS // 10 and stricter, "the generated set must exercise both sides"
    assert disagreements == []
