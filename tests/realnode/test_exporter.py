"""The data-exporter on a real node (C8, R-EXPORTER): per-pod GPU metrics from the real kubelet's PodResources,
scraped by a real Prometheus.

The exporter (``python -m services.data_exporter``) runs as a host process in the GPU node's namespace on its
fake host, next to the project's gpu-device agent, and reads the real kubelet's PodResources socket. A pod
that gets a GPU from the real kubelet appears as that GPU's ``namespace``/``pod``/``container`` labels, in the
exporter's text and in a real Prometheus scraping it; when the pod is gone, the labels go.
"""

from __future__ import annotations

import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from metax_dev.controlplane import processes
from metax_dev.realnode import node
from metax_hw_fake import host
from tests.services.exporter.prometheus import Prometheus, free_port
from tests.support.real_node import GPUS

from . import gpus, pods

pytestmark = pytest.mark.realnode

GPU = "metax-tech.com/gpu"


@pytest.fixture
def exporter(gpu_host: host.FakeHost, gpu_node: node.RealNode) -> Iterator[str]:
    port = free_port()
    env = {
        "NODE_NAME": gpu_node.name,
        "METAX_HOST_ROOT": str(gpu_host.root),
        "METAX_POD_RESOURCES_SOCKET": str(gpu_node.pod_resources_socket),
        "METAX_EXPORTER_ADDRESS": "127.0.0.1",
        "METAX_EXPORTER_PORT": str(port),
        "METAX_EXPORTER_SAMPLE_INTERVAL": "1",
        "PATH": gpu_host.env()["PATH"],
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    process = gpu_node.spawn("data-exporter", [sys.executable, "-m", "services.data_exporter"], env)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.stop()


def holders(target: str) -> set[tuple[str, str, str, str]]:
    try:
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return set()
    return {
        (s.labels["pci_address"], s.labels["namespace"], s.labels["pod"], s.labels["container"])
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "mx_gpu_usage" and s.labels.get("pod")
    }


def test_a_pods_gpu_carries_its_labels_from_the_real_kubelet_into_prometheus(
    kube: client.CoreV1Api,
    namespace: str,
    gpu_node: node.RealNode,
    gpu_agent: processes.Process,
    exporter: str,
) -> None:
    pods.wait(lambda: gpus.allocatable(kube, gpu_node.name) == GPUS, f"{GPUS} allocatable {GPU}")
    script = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; echo DONE; sleep 3600'
    kube.create_namespaced_pod(namespace, pods.busybox_pod("trainer", gpu_node.name, script, resources={GPU: "1"}))
    [visible] = gpus.env_value(pods.wait_logs(kube, namespace, "trainer", "DONE"), "VISIBLE").split(",")
    expected = {(visible, namespace, "trainer", "main")}
    pods.wait(lambda: holders(exporter) == expected, "the pod's labels on its GPU's series", timeout=60)

    with tempfile.TemporaryDirectory(prefix="metax-prometheus-") as work:
        prometheus = Prometheus(Path(work), exporter)
        try:
            pods.wait(prometheus.ready, "prometheus ready", timeout=60)
            query = f'mx_gpu_usage{{namespace="{namespace}", pod="trainer", container="main"}}'
            [series] = pods.wait(lambda: prometheus.query(query), "the pod's series in Prometheus", timeout=60)
            assert series["metric"]["pci_address"] == visible
            assert series["metric"]["Hostname"] == gpu_node.name
        finally:
            prometheus.stop()

    kube.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)
    pods.wait(lambda: holders(exporter) == set(), "the labels gone with the pod", timeout=90)
