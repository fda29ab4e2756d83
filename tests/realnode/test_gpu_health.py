"""GPU health on a real node (R-HEALTH, issue 42): the real kubelet over the real device-plugin gRPC protocol, the
real scheduler, the project's gpu-device agent on a fake host with 8 GPUs, and the operator's half (the Node
condition and remediation, `services.operator.gpu_health`) against the real API server.

* A fault on GPU 3 of 8 (mx-smi reports its GPU-State Error) makes exactly that device Unhealthy: 7 allocatable,
  a pod asking for 8 stays Pending, one asking for 7 runs without GPU 3; the agent's report on the Node names it,
  and the Node gets an Event. Cleared, GPU 3 is allocatable again with no agent restart, and a GPURecovered Event
  says so.
* One failed mx-smi run (a hung tool, killed at its deadline) withdraws nothing.
* With remediation on, only the pod holding the unusable GPU is evicted, and a PodDisruptionBudget that forbids it
  stops the eviction, which the Node's Event names; the condition MetaXGPUHealthy follows the report both ways.

How long each step took is printed (-s); the latency goals are measured in benchmarks/device_plugin.py.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from metax_core.health import report
from metax_core.spec import model as spec
from metax_core.wire import event_reasons
from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import processes
from metax_dev.realnode import node
from metax_hw_fake import builder, host
from metax_k8s import client as k8s_client
from metax_k8s import connect, events, nodes, objects
from services.operator import gpu_health, informers
from tests.support.real_node import fake_gpu_host, spawn_gpu_agent, start_real_node

from . import gpus, pods

pytestmark = pytest.mark.realnode

GPU = gpus.GPU
COUNT = 8
INTERVAL = 1.0
"""The agent's healthyInterval here (tests.support.real_node.AGENT_ENV)."""


@pytest.fixture(scope="module")
def fake() -> Iterator[host.FakeHost]:
    yield from fake_gpu_host(builder.FakeHostBuilder().gpus(COUNT), "metax-health-")


@pytest.fixture(scope="module")
def member(
    request: pytest.FixtureRequest, realnode_plane: controlplane.ControlPlane, fake: host.FakeHost
) -> node.RealNode:
    return start_real_node(request, realnode_plane, fake, "health-node")


@pytest.fixture(scope="module")
def agent(
    request: pytest.FixtureRequest,
    realnode_plane: controlplane.ControlPlane,
    fake: host.FakeHost,
    member: node.RealNode,
) -> processes.Process:
    started = spawn_gpu_agent(realnode_plane, fake, member)
    request.addfinalizer(started.stop)
    return started


@pytest.fixture
def healthy(
    kube: client.CoreV1Api, fake: host.FakeHost, member: node.RealNode, agent: processes.Process
) -> Iterator[None]:
    fake.clear_faults()
    pods.wait(lambda: gpus.allocatable(kube, member.name) == COUNT, f"{COUNT} allocatable {GPU}")
    yield
    fake.clear_faults()
    for address in addresses(fake):
        fake.set_gpu(address, state="Available")


@pytest.fixture
def operator_side(realnode_plane: controlplane.ControlPlane) -> gpu_health.GpuHealth:
    """The operator's GPU health with its ports on the real API server (as the operator builds them)."""
    api = k8s_client.HttpApi(connect.connect(str(realnode_plane.kubeconfig_path)))
    return gpu_health.GpuHealth(
        objects.K8sObjects(api),
        nodes.K8sNodeMetadata(api, field_manager="metax-operator"),
        events.K8sEvents(api, reporting_controller="metax-tech.com/operator", reporting_instance="test"),
    )


def addresses(fake: host.FakeHost) -> list[str]:
    return sorted(str(f.address) for f in gpus.functions(fake))


def node_report(kube: client.CoreV1Api, name: str) -> report.Report | None:
    text = (kube.read_node(name).metadata.annotations or {}).get(report.ANNOTATION)
    return None if text is None else report.decode(text)


def unhealthy_in_report(kube: client.CoreV1Api, name: str) -> list[str]:
    found = node_report(kube, name)
    return [g.address for g in found.gpus] if found else []


def node_events(kube: client.CoreV1Api, name: str, reason: str) -> list[str]:
    listed = kube.list_namespaced_event("default", field_selector=f"involvedObject.name={name},reason={reason}")
    return [str(e.message) for e in listed.items]


def health_condition(kube: client.CoreV1Api, name: str) -> tuple[str, str, str] | None:
    for c in kube.read_node(name).status.conditions or []:
        if c.type == report.CONDITION_TYPE:
            return (c.status, c.reason, c.message)
    return None


def slim(kube: client.CoreV1Api, name: str) -> dict[str, Any]:
    """The Node as the operator's cache keeps it."""
    raw = kube.api_client.sanitize_for_serialization(kube.read_node(name))
    return informers.slim_node(raw)


def timed(what: str, since: float) -> None:
    print(f"{what}: {time.monotonic() - since:.2f} s")


def test_a_fault_on_gpu_3_of_8_withdraws_exactly_it_and_it_comes_back_without_a_restart(
    kube: client.CoreV1Api,
    namespace: str,
    fake: host.FakeHost,
    member: node.RealNode,
    agent: processes.Process,
    healthy: None,
) -> None:
    third = addresses(fake)[3]
    began = time.monotonic()
    fake.set_gpu(third, state="Error")
    pods.wait(lambda: gpus.allocatable(kube, member.name) == COUNT - 1, f"{COUNT - 1} allocatable")
    timed("fault -> Node allocatable 7", began)
    assert gpus.capacity(kube, member.name) == COUNT
    pods.wait(lambda: unhealthy_in_report(kube, member.name) == [third], "the report naming GPU 3")
    (entry,) = node_report(kube, member.name).gpus  # type: ignore[union-attr]
    assert [f.kind.value for f in entry.faults] == ["StateFault"] and entry.severity.word == "unusable"
    pods.wait(lambda: node_events(kube, member.name, event_reasons.GPU_UNUSABLE), "a GPUUnusable Event")
    assert third in node_events(kube, member.name, event_reasons.GPU_UNUSABLE)[0]

    kube.create_namespaced_pod(namespace, pods.scheduled_pod("eight", member.name, "sleep 3600", {GPU: str(COUNT)}))
    kube.create_namespaced_pod(namespace, pods.scheduled_pod("seven", member.name, "sleep 3600", {GPU: "7"}))
    pods.wait_running(kube, namespace, "seven")
    assert sorted(gpus.held_by(member, namespace, "seven")) == [a for a in addresses(fake) if a != third]
    message = pods.wait(lambda: gpus.unschedulable(kube, namespace, "eight"), "pod eight Unschedulable")
    assert f"Insufficient {GPU}" in message

    began = time.monotonic()
    fake.set_gpu(third, state="Available")
    pods.wait(lambda: gpus.allocatable(kube, member.name) == COUNT, f"{COUNT} allocatable again")
    timed("clear -> Node allocatable 8", began)
    pods.wait(lambda: unhealthy_in_report(kube, member.name) == [], "an empty report")
    pods.wait(lambda: node_events(kube, member.name, event_reasons.GPU_RECOVERED), "a GPURecovered Event")
    kube.delete_namespaced_pod("seven", namespace, grace_period_seconds=0)
    pods.wait_running(kube, namespace, "eight")
    assert sorted(gpus.held_by(member, namespace, "eight")) == addresses(fake)
    assert agent.alive() and "Traceback" not in agent.tail(400), agent.tail()


def test_one_hung_mx_smi_run_withdraws_nothing(
    kube: client.CoreV1Api, fake: host.FakeHost, member: node.RealNode, agent: processes.Process, healthy: None
) -> None:
    before = agent.log_path.read_text().count("health reading failed")
    fake.break_mx_smi("fail")
    pods.wait(lambda: agent.log_path.read_text().count("health reading failed") > before, "a failed reading")
    fake.break_mx_smi(None)
    time.sleep(3 * INTERVAL)  # several good readings after it, at the agent's pace
    assert gpus.allocatable(kube, member.name) == COUNT
    assert unhealthy_in_report(kube, member.name) == []


def test_remediation_evicts_only_the_pod_on_the_unusable_gpu_and_a_budget_stops_it(
    kube: client.CoreV1Api,
    namespace: str,
    fake: host.FakeHost,
    member: node.RealNode,
    operator_side: gpu_health.GpuHealth,
    healthy: None,
) -> None:
    for name in ("on-bad", "bystander"):
        pod = pods.scheduled_pod(name, member.name, "sleep 3600", {GPU: "1"})
        pod["metadata"]["labels"] = {"app": name}
        kube.create_namespaced_pod(namespace, pod)
    for name in ("on-bad", "bystander"):
        pods.wait_running(kube, namespace, name)
    (bad,) = gpus.held_by(member, namespace, "on-bad")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-on-bad"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "on-bad"}}},
    }
    client.PolicyV1Api(kube.api_client).create_namespaced_pod_disruption_budget(namespace, budget)
    pods.wait(
        lambda: (
            client.PolicyV1Api(kube.api_client)
            .read_namespaced_pod_disruption_budget("keep-on-bad", namespace)
            .status.current_healthy
            == 1
        ),
        "the budget counting the pod",
    )

    fake.set_gpu(bad, state="Error")
    pods.wait(
        lambda: (
            (r := node_report(kube, member.name)) is not None
            and [g.holders for g in r.gpus] == [(f"{namespace}/on-bad",)]
        ),
        "the report naming the GPU and its holder",
    )
    now = dt.datetime.now(dt.UTC)
    retry = operator_side.apply([slim(kube, member.name)], spec.Remediation.EVICT, now)
    assert retry is not None, "a refused eviction is not tried again"
    status, reason, message = health_condition(kube, member.name) or ("", "", "")
    assert (status, reason) == ("False", "GPUUnusable") and bad in message
    blocked = pods.wait(
        lambda: node_events(kube, member.name, event_reasons.GPU_REMEDIATION_BLOCKED), "a GPURemediationBlocked Event"
    )
    assert f"{namespace}/keep-on-bad allows no disruption now" in blocked[0]
    assert pods.phase(kube, namespace, "on-bad") == "Running"

    client.PolicyV1Api(kube.api_client).delete_namespaced_pod_disruption_budget("keep-on-bad", namespace)
    assert operator_side.apply([slim(kube, member.name)], spec.Remediation.EVICT, now) is None
    pods.wait(
        lambda: (
            not [
                p
                for p in kube.list_namespaced_pod(namespace).items
                if p.metadata.name == "on-bad" and not p.metadata.deletion_timestamp
            ]
        ),
        "on-bad evicted",
    )
    evicted = node_events(kube, member.name, event_reasons.GPU_REMEDIATION_EVICTED)
    assert evicted and f"{namespace}/on-bad" in evicted[0] and "bystander" not in evicted[0]
    assert pods.phase(kube, namespace, "bystander") == "Running"
    assert (kube.read_node(member.name).metadata.annotations or {}).get("metax-tech.com/gpu.remediations")

    fake.set_gpu(bad, state="Available")
    pods.wait(lambda: unhealthy_in_report(kube, member.name) == [], "an empty report")
    operator_side.apply([slim(kube, member.name)], spec.Remediation.EVICT, dt.datetime.now(dt.UTC))
    assert (health_condition(kube, member.name) or ("",))[0] == "True"
    writes = operator_side.condition_writes
    operator_side.apply([slim(kube, member.name)], spec.Remediation.EVICT, dt.datetime.now(dt.UTC))
    assert operator_side.condition_writes == writes, "the condition was written again unchanged"
    operator_side.clear([slim(kube, member.name)])
    assert health_condition(kube, member.name) is None
    assert any(c.type == "Ready" for c in kube.read_node(member.name).status.conditions), "the kubelet's went too"
