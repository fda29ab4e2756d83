"""Who may reach the ports the product's pods listen on (issue 38 item 4; seed 000 §1.3.4): each NetworkPolicy
selects exactly its component's pods, admits exactly the port their container declares, from the peers the spec
says (the exporter: Prometheus by default, none behind a NodePort or LoadBalancer Service unless asked; the
extender: any source by default, as kube-scheduler is host-networked), and bad peers are refused by field.
Structural: the test bed's CNI enforces no NetworkPolicy (docs/security.md "Network")."""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.cluster import network_policies, workloads
from metax_core.errors import InvalidSpec
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE

BASE = {
    "registry": REGISTRY_EXAMPLE,
    "driver": {"payload": {"version": "2.14.6"}},
    "exporter": {"deploy": True},
    "gpuScheduler": {"deploy": True},
}


def _objects(document: dict[str, Any]) -> dict[str, Any]:
    rendered = workloads.render(validation.parse(document))
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in rendered.objects}


@pytest.mark.parametrize(
    ("workload", "port"), [("DaemonSet/metax-data-exporter", 9400), ("Deployment/metax-gpu-scheduler", 8088)]
)
def test_each_listening_workload_admits_exactly_its_declared_port(workload: str, port: int) -> None:
    objects = _objects(BASE)
    name = workload.split("/")[1]
    policy = objects[f"NetworkPolicy/{name}"]["spec"]
    template = objects[workload]["spec"]["template"]
    selected = policy["podSelector"]["matchLabels"]
    assert selected.items() <= template["metadata"]["labels"].items()
    other_pods = [o for k, o in objects.items() if o["kind"] in ("DaemonSet", "Deployment") and k != workload]
    assert not [o for o in other_pods if selected.items() <= o["spec"]["template"]["metadata"]["labels"].items()]
    declared = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
    (rule,) = policy["ingress"]
    assert policy["policyTypes"] == ["Ingress"] and [p["port"] for p in rule["ports"]] == declared == [port]


def test_every_other_workload_gets_one_that_admits_nothing() -> None:
    """No pod of the product is open by omission: a workload that declares no port has a policy of its own with no
    ingress rule (every ingress refused), selecting exactly its pods."""
    objects = _objects(BASE)
    pods = {k.split("/")[1]: o for k, o in objects.items() if o["kind"] in ("DaemonSet", "Deployment")}
    policies = {k.split("/")[1]: o["spec"] for k, o in objects.items() if k.startswith("NetworkPolicy/")}
    assert set(policies) == set(pods)
    for name, pod in pods.items():
        declared = [p for c in pod["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
        selected = policies[name]["podSelector"]["matchLabels"]
        assert [
            n for n, o in pods.items() if selected.items() <= o["spec"]["template"]["metadata"]["labels"].items()
        ] == [name]
        assert bool(policies[name]["ingress"]) is bool(declared), name


def test_the_exporter_admits_prometheus_by_default_and_what_the_spec_names() -> None:
    (rule,) = _objects(BASE)["NetworkPolicy/metax-data-exporter"]["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": network_policies.PROMETHEUS_LABEL}}
    ]
    mine = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    (rule,) = _objects({**BASE, "exporter": {"deploy": True, "networkPolicy": {"allowedFrom": mine}}})[
        "NetworkPolicy/metax-data-exporter"
    ]["spec"]["ingress"]
    assert rule["from"] == mine


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_behind_an_external_service_the_exporter_has_none_unless_asked(kind: str) -> None:
    exporter = {"deploy": True, "service": {"type": kind}}
    assert "NetworkPolicy/metax-data-exporter" not in _objects({**BASE, "exporter": exporter})
    asked = {**exporter, "networkPolicy": {"enabled": True, "allowedFrom": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}}
    (rule,) = _objects({**BASE, "exporter": asked})["NetworkPolicy/metax-data-exporter"]["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]


def test_the_extender_admits_any_source_to_its_port_unless_narrowed_and_can_be_turned_off() -> None:
    (rule,) = _objects(BASE)["NetworkPolicy/metax-gpu-scheduler"]["spec"]["ingress"]
    assert "from" not in rule
    off = {**BASE, "gpuScheduler": {"deploy": True, "networkPolicy": {"enabled": False}}}
    assert "NetworkPolicy/metax-gpu-scheduler" not in _objects(off)


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        (
            [{}],
            "exporter.networkPolicy.allowedFrom[0]: must have ipBlock alone, or namespaceSelector and/or podSelector",
        ),
        ([{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}], "exporter.networkPolicy.allowedFrom[0]: must have"),
        ([{"pods": {}}], "exporter.networkPolicy.allowedFrom[0]: must have"),
        ([{"podSelector": {}}] * 33, "exporter.networkPolicy.allowedFrom: must have at most 32 items"),
    ],
)
def test_bad_peers_are_refused_naming_the_field(peers: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        validation.parse({**BASE, "exporter": {"deploy": True, "networkPolicy": {"allowedFrom": peers}}})
    assert any(str(e).startswith(message) for e in refused.value.errors), refused.value.errors
