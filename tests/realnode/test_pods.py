"""A real node runs real pods: a busybox pod runs on the kubelet + containerd + runc built here, its
log is read back through the kubectl built here (API server -> kubelet on loopback), ``kubectl exec``
reaches it, and its IP comes from the node's own range (the minimal CNI plugin); a running pod survives
a containerd restart (same container, no restart, exec still works)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from kubernetes import client

from metax_dev.realnode import node

from . import pods

pytestmark = pytest.mark.realnode


def test_node_is_ready_with_the_loopback_address_only(kube: client.CoreV1Api, gpu_node: node.RealNode) -> None:
    found = kube.read_node(gpu_node.name)
    assert [(a.type, a.address) for a in found.status.addresses] == [("InternalIP", "127.0.0.1")]
    assert not [t for t in (found.spec.taints or []) if "uninitialized" in t.key]
    assert found.status.node_info.kubelet_version == "v1.36.3"
    assert found.status.node_info.container_runtime_version == "containerd://2.4.2"


def test_busybox_pod_runs_and_its_log_is_read_with_kubectl(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, kubectl: Callable[..., str]
) -> None:
    script = "echo hello from $(hostname) on $(uname -s); sleep 3600"
    kube.create_namespaced_pod(namespace, pods.busybox_pod("hello", gpu_node.name, script))
    pods.wait_running(kube, namespace, "hello")

    text = pods.wait(lambda: kubectl("logs", "-n", namespace, "hello"), "a log line from pod hello")
    assert text.strip() == "hello from hello on Linux"
    assert (
        kubectl("exec", "-n", namespace, "hello", "--", "sh", "-c", "echo $((6 * 7)) $(cat /proc/1/comm)")
        == "42 sleep\n"
    )

    pod_ip = kube.read_namespaced_pod("hello", namespace).status.pod_ip
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(gpu_node.pod_cidr)


def test_a_failing_container_reports_its_exit_code(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode
) -> None:
    kube.create_namespaced_pod(namespace, pods.busybox_pod("fails", gpu_node.name, "exit 3"))
    pods.wait(lambda: pods.phase(kube, namespace, "fails") == "Failed", "pod fails Failed")
    state = kube.read_namespaced_pod("fails", namespace).status.container_statuses[0].state
    assert state.terminated.exit_code == 3


def test_running_pod_survives_a_containerd_restart(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, kubectl: Callable[..., str]
) -> None:
    kube.create_namespaced_pod(namespace, pods.busybox_pod("steady", gpu_node.name, "sleep 3600"))
    pods.wait_running(kube, namespace, "steady")
    before = kube.read_namespaced_pod("steady", namespace).status.container_statuses[0]

    gpu_node.restart_containerd()

    def echo() -> str:
        try:
            return kubectl("exec", "-n", namespace, "steady", "--", "echo", "still here")
        except AssertionError:  # the kubelet's CRI connection redials the new containerd with a back-off
            return ""

    assert pods.wait(echo, "kubectl exec through the restarted containerd", timeout=30) == "still here\n"
    after = kube.read_namespaced_pod("steady", namespace).status.container_statuses[0]
    assert after.container_id == before.container_id
    assert after.restart_count == 0 and after.state.running is not None
