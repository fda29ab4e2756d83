"""The real kube-scheduler places multi-GPU pods through the gpu-scheduler extender (C9, docs/scheduler.md).

A control plane of its own (the session's keeps its default scheduler): kube-scheduler started with a
KubeSchedulerConfiguration whose ``extenders`` entry is the one the product documents
(`extender.scheduler_extender`), the extender served in this process from its watch cache over the real
API server, three kwok nodes whose topology is published with topo-worker's writer (`topo_worker.agent.published`)
and whose GPUs are allocatable as a kubelet would make them:

- a 4-GPU pod lands on the node whose best free 4-set scores best (a MetaXLink group), not on the node with
  more GPUs on PCIe only, and never on the node with fewer than 4 free (filtered by the extender: its
  allocatable count alone would fit);
- as pods fill nodes (the test hands out `placement.best_set` as gpu-device does, and republishes), the
  choice follows;
- its ``/metrics`` counts the scheduler's filter and prioritize calls and the nodes it turned away;
- with the extender down, a GPU pod is still scheduled by the default plugins (``ignorable: true``).
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from metax_core.inventory import PciAddress
from metax_core.topology import document, extender, placement
from metax_dev.controlplane import build, network
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client as metax_client
from metax_k8s import objects
from services.gpu_scheduler import cache, server
from services.topo_worker import agent as topo_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GPU = extender.GPU


def gpu(i: int, *, numa: int, root: int, switch: int | None, mx: tuple[int, ...] = ()) -> document.Gpu:
    host = numa * 0x80
    path = [PciAddress(f"0000:{host:02x}:{root:02x}.0")]
    if switch is not None:
        path += [PciAddress(f"0000:{host + 0x40 + switch:02x}:00.0"), PciAddress(f"0000:{host + 0x60 + i:02x}:01.0")]
    return document.Gpu(
        PciAddress(f"0000:{0x10 + i:02x}:00.0"),
        numa,
        tuple(path),
        tuple(PciAddress(f"0000:{0x10 + m:02x}:00.0") for m in mx),
    )


def metaxlink_node() -> document.NodeTopology:
    """GPUs 0–3 one MetaXLink group behind one switch; 4–7 each on its own root port across two NUMA nodes."""
    gpus = [gpu(i, numa=0, root=1, switch=0, mx=tuple(m for m in range(4) if m != i)) for i in range(4)]
    gpus += [gpu(i, numa=i % 2, root=2 + i, switch=None) for i in range(4, 8)]
    return document.NodeTopology(gpus=tuple(gpus), free=tuple(g.address for g in gpus))


def pcie_node() -> document.NodeTopology:
    """Two PCIe switches of four GPUs each, no MetaXLink."""
    gpus = [gpu(i, numa=i // 4, root=1, switch=i // 4) for i in range(8)]
    return document.NodeTopology(gpus=tuple(gpus), free=tuple(g.address for g in gpus))


class Cluster:
    def __init__(self, plane: controlplane.ControlPlane, state: cache.Cache, port: int) -> None:
        self.plane = plane
        self.state = state
        self.port = port
        self.api = plane.api_client()
        self.core = client.CoreV1Api(self.api)
        self.server: server.Server | None = None
        self.docs: dict[str, document.NodeTopology] = {}

    def publish(self, name: str, doc: document.NodeTopology, allocatable: int = 8) -> None:
        """What topo-worker and a kubelet with gpu-device would have on the Node."""
        self.docs[name] = doc
        self.core.patch_node(name, {"metadata": {"annotations": topo_agent.published(doc)}})
        self.core.patch_node_status(name, {"status": {"allocatable": {GPU: str(allocatable)}, "capacity": {GPU: "8"}}})
        wanted = document.encode(doc)

        def seen() -> bool:
            facts = self.state.snapshot()[0].get(name)
            return facts is not None and facts.topology is not None and document.encode(facts.topology) == wanted

        wait_for(seen, f"the extender's cache to see {name}'s topology")

    def hand_out(self, name: str, n: int) -> None:
        """gpu-device's GetPreferredAllocation (the same function) takes the set; topo-worker republishes."""
        doc = self.docs[name]
        choice = placement.best_set(doc, n)
        assert choice is not None
        left = tuple(a for a in doc.free if a not in choice.gpus)
        self.publish(name, document.NodeTopology(gpus=doc.gpus, nics=doc.nics, free=left))

    def schedule(self, namespace: str, gpus: int) -> str:
        name = f"p-{uuid.uuid4().hex[:6]}"
        body: dict[str, Any] = {
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        self.core.create_namespaced_pod(namespace, body)

        def bound() -> str | None:
            return self.core.read_namespaced_pod(name, namespace).spec.node_name

        wait_for(bound, f"pod {name} to be bound")
        node = bound()
        assert node is not None
        wait_for(lambda: self.state.snapshot()[1].get(node, 0) >= gpus, "the extender's cache to see the binding")
        return node


def wait_for(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[Cluster]:
    port = network.free_port()
    wiring = extender.scheduler_extender(f"http://{network.LOOPBACK}:{port}", timeout_seconds=2)
    plane = controlplane.ControlPlane(
        nodes=3, node_prefix="gpu", bin_dir=build.build(quiet=True).bin_dir, scheduler_extenders=[wiring]
    )
    plane.start()
    stop = threading.Event()
    try:
        api = metax_client.HttpApi(metax_client.api_client(plane.kubeconfig_path))
        state = cache.Cache(objects.K8sObjects(api), watch_seconds=30)
        state.start(stop)
        c = Cluster(plane, state, port)
        c.server = server.Server(state, host=network.LOOPBACK, port=port).start()
        wait_for(lambda: all(e.is_set() for e in state.synced.values()), "the extender's cache to list")
        yield c
    finally:
        stop.set()
        plane.stop()


@pytest.fixture
def namespace(gpu_cluster: Cluster) -> Iterator[str]:
    name = f"sched-{uuid.uuid4().hex[:6]}"
    gpu_cluster.core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: any(
            sa.metadata.name == "default" for sa in gpu_cluster.core.list_namespaced_service_account(name).items
        ),
        "the default service account",
    )
    yield name
    gpu_cluster.core.delete_namespace(name)


def test_multi_gpu_pods_follow_the_best_free_set_and_the_extender_filters(gpu_cluster: Cluster, namespace: str) -> None:
    c = gpu_cluster
    mx, pcie, few = c.plane.node_names
    c.publish(mx, metaxlink_node())
    c.publish(pcie, pcie_node())
    # 8 allocatable as far as kube-scheduler knows, but only 3 free in the published document
    crowded = pcie_node()
    c.publish(few, document.NodeTopology(gpus=crowded.gpus, free=crowded.free[:3]))
    first = placement.best_set(c.docs[mx], 4)
    second = placement.best_set(c.docs[pcie], 4)
    assert first is not None and second is not None and first.score > second.score

    assert c.schedule(namespace, 4) == mx  # the MetaXLink group
    c.hand_out(mx, 4)
    left = placement.best_set(c.docs[mx], 4)
    assert left is not None and left.score < second.score
    assert c.schedule(namespace, 4) == pcie  # one switch of the PCIe node beats what is left on mx
    c.hand_out(pcie, 4)
    assert c.schedule(namespace, 4) == pcie  # its other switch still beats mx's leftovers
    c.hand_out(pcie, 4)
    assert c.schedule(namespace, 4) == mx  # the only node with 4 free; `few` never had them
    c.hand_out(mx, 4)
    pods = c.core.list_namespaced_pod(namespace).items
    assert all(p.spec.node_name != few for p in pods)

    # nothing has 4 free now: the extender filters every node and the pod stays pending with its reasons
    name = f"p-{uuid.uuid4().hex[:6]}"
    c.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: "4"}}}],
                "tolerations": [{"operator": "Exists"}],
            },
        },
    )

    def unschedulable() -> bool:
        pod = c.core.read_namespaced_pod(name, namespace)
        return any(
            cond.type == "PodScheduled" and cond.reason == "Unschedulable" and f"free {GPU}" in (cond.message or "")
            for cond in pod.status.conditions or []
        )

    wait_for(unschedulable, "the pod to be unschedulable with the extender's reason")
    c.core.delete_namespaced_pod(name, namespace)

    # every placement above went through the extender, as its own metrics say
    assert c.server is not None
    with urllib.request.urlopen(f"http://{network.LOOPBACK}:{c.port}{extender.METRICS_PATH}", timeout=5) as answer:
        families = {f.name: f for f in text_string_to_metric_families(answer.read().decode())}
    answered = {
        s.labels["verb"]: s.value
        for s in families[extender.REQUESTS_METRIC].samples
        if s.name.endswith("_total") and s.labels["outcome"] == "answered"
    }
    # filter for each pod (the pending one is retried); prioritize only where two nodes were feasible: kube-scheduler
    # skips scoring with one (the first three placements had mx and pcie, the fourth only mx)
    assert answered["filter"] >= 5 and answered["prioritize"] >= 3, answered
    [filtered_out] = [s.value for s in families[extender.FILTERED_OUT_METRIC].samples if s.name.endswith("_total")]
    assert filtered_out >= 3  # `few` at every placement above, and every node for the last pod


def test_with_the_extender_down_gpu_pods_still_schedule(gpu_cluster: Cluster, namespace: str) -> None:
    c = gpu_cluster
    for name in c.plane.node_names:
        c.publish(name, pcie_node(), allocatable=8)
    for pod in c.core.list_pod_for_all_namespaces().items:
        if pod.metadata.namespace.startswith("sched-") and pod.metadata.namespace != namespace:
            c.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    wait_for(lambda: not any(c.state.snapshot()[1].values()), "the earlier pods to be gone from the cache")
    assert c.server is not None
    c.server.stop()  # nothing listens on the extender's port now: kube-scheduler's calls fail at once
    assert c.schedule(namespace, 4) in c.plane.node_names
