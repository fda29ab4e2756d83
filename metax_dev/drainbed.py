"""A GPU fleet that is never idle, on kwok nodes, for the driver rollout's drain (issue 41 item 3; docs/rollout.md
"Draining"): shared by tests/integration/operator/test_rollout_drain.py and ``python -m benchmarks.drain``.

What it builds on the test control plane: GPU capacity on kwok nodes (``metax-tech.com/gpu`` in the node status, as
gpu-device's registration makes the kubelet report it), Deployments whose pods each hold one GPU with a
PodDisruptionBudget allowing one disruption per app (the real scheduler places them, the real disruption
controller keeps the budgets' status, kwok runs the pods), and a `Watch` that records, from the API's own watch
streams, the invariants a drain must keep: how many nodes the rollout held cordoned at once, and the fewest ready
pods each app ever had.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from metax_core.errors import ClusterError
from metax_core.node import devices
from metax_core.wire import meta
from metax_k8s import objects
from metax_k8s.api import Api

GPU = devices.Resource.GPU.value
APP_LABEL = "drainbed-app"
FIELD_MANAGER = "drainbed"


def give_gpus(api: Api, nodes: Iterable[str], per_node: int) -> None:
    """``per_node`` GPUs in each node's capacity and allocatable (what the kubelet reports once gpu-device runs)."""
    for name in nodes:
        resources = {GPU: str(per_node)}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        api.apply(
            {**body, "status": {"capacity": resources, "allocatable": resources}},
            field_manager=FIELD_MANAGER,
            subresource="status",
            force=True,
        )


def namespace(api: Api, name: str) -> None:
    try:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ClusterError as exc:
        if exc.status != 409:
            raise


def apps(api: Api, ns: str, count: int, replicas: int) -> list[str]:
    """``count`` Deployments of ``replicas`` one-GPU pods, each with a budget that allows one disruption."""
    names = [f"app-{i:03d}" for i in range(count)]
    for name in names:
        labels = {APP_LABEL: name}
        container = {"name": "train", "image": "registry.example/train:1", "resources": {"limits": {GPU: "1"}}}
        api.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                },
            },
            field_manager=FIELD_MANAGER,
        )
        api.apply(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
            },
            field_manager=FIELD_MANAGER,
        )
    return names


def bare_pod(api: Api, ns: str, name: str, node: str) -> None:
    """A GPU pod no controller recreates, bound to ``node`` (a drain without ``force`` must not evict it)."""
    container = {"name": "job", "image": "registry.example/job:1", "resources": {"limits": {GPU: "1"}}}
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "containers": [container]},
        }
    )


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def ready_pods(api: Api, ns: str) -> dict[str, int]:
    """Ready (and not terminating) pods per app."""
    counts: dict[str, int] = {}
    for pod in objects.K8sObjects(api).list("v1", "Pod", ns).items:
        app = ((pod.get("metadata") or {}).get("labels") or {}).get(APP_LABEL)
        if app and _ready(dict(pod)):
            counts[app] = counts.get(app, 0) + 1
    return counts


class Watch:
    """Two watch streams: the nodes the rollout holds cordoned (its mark), and each app's ready pods."""

    def __init__(self, api: Api, nodes: Sequence[str], ns: str, apps: Sequence[str]) -> None:
        self.objects = objects.K8sObjects(api)
        self.nodes = set(nodes)
        self.ns = ns
        self.marked: set[str] = set()
        self.most_marked = 0
        self.held: dict[str, list[float]] = {}
        """node → seconds (monotonic) each time the rollout held it cordoned, from its cordon to its uncordon."""
        self._since: dict[str, float] = {}
        self.pods: dict[str, tuple[str, bool]] = {}
        """pod name → (app, ready)"""
        self.fewest_ready = dict.fromkeys(apps, 10**9)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Watch:
        node_version = self.objects.list("v1", "Node").resource_version
        pods = self.objects.list("v1", "Pod", self.ns)
        for pod in pods.items:
            self._pod("ADDED", dict(pod), track=False)
        for app in self.fewest_ready:  # from here on, the fewest ready pods each app ever had
            self.fewest_ready[app] = sum(1 for a, r in self.pods.values() if a == app and r)
        self._threads = [
            threading.Thread(target=self._run, args=("v1", "Node", None, node_version), daemon=True),
            threading.Thread(target=self._run, args=("v1", "Pod", self.ns, pods.resource_version), daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _run(self, api_version: str, kind: str, ns: str | None, version: str) -> None:
        while not self._stop.is_set():
            for event in self.objects.watch(api_version, kind, ns, resource_version=version, timeout_seconds=5):
                version = event.object["metadata"].get("resourceVersion", version)
                if "name" not in event.object["metadata"]:
                    continue  # a bookmark
                if kind == "Node":
                    self._node(dict(event.object))
                else:
                    self._pod(event.type.value, dict(event.object))
                if self._stop.is_set():
                    return

    def _node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if name not in self.nodes:
            return
        with self._lock:
            if meta.ROLLOUT_CORDON in (node["metadata"].get("annotations") or {}):
                if name not in self.marked:
                    self._since[name] = time.monotonic()
                self.marked.add(name)
            elif name in self.marked:
                self.marked.discard(name)
                self.held.setdefault(name, []).append(time.monotonic() - self._since.pop(name))
            self.most_marked = max(self.most_marked, len(self.marked))

    def _pod(self, event: str, pod: dict[str, Any], *, track: bool = True) -> None:
        app = ((pod.get("metadata") or {}).get("labels") or {}).get(APP_LABEL)
        if not app:
            return
        with self._lock:
            name = pod["metadata"]["name"]
            if event == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = (app, _ready(pod))
            if track and app in self.fewest_ready:
                ready = sum(1 for a, r in self.pods.values() if a == app and r)
                self.fewest_ready[app] = min(self.fewest_ready[app], ready)
