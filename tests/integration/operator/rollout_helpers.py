"""Driver-pod deletions observed on the API, grouped into loops, and ten extra kwok nodes for a rollout."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from operator_helpers import CR_API, NS, Env

from metax_core.cluster import workloads
from metax_core.errors import ClusterError
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client, objects

SEED_POLICY: dict[str, Any] = {
    "enableRollout": True,
    "upgradeSteps": [
        {"replicas": 2},
        {"replicas": 5, "pauseDuration": 3000},
        {"replicas": 8, "pauseDuration": 3000},
        {"replicas": "100%"},
    ],
    "maxParallel": "50%",
    "maxFailureThreshold": 0,
}
"""§3.2.8 (steps 2, 5, 8, 100%; maxParallel 50%; manual, timed, timed, manual) with 3 s pauses to keep it short."""


@contextlib.contextmanager
def extra_gpu_nodes(plane: controlplane.ControlPlane, env: Env, prefix: str, count: int) -> Iterator[list[str]]:
    """``count`` more kwok nodes labelled as GPU nodes; the session's own nodes are unlabelled for the test."""
    names = plane.add_nodes(count, prefix=prefix)
    for name in env.gpu_nodes:
        env.api.merge_patch("v1", "Node", name, {"metadata": {"labels": {workloads.GPU_NODE_LABEL: None}}})
    env.label_gpu_nodes(names)
    saved = env.gpu_nodes
    env.gpu_nodes = names
    try:
        yield names
    finally:
        env.gpu_nodes = saved
        for name in names:
            with contextlib.suppress(ClusterError):
                env.api.delete("v1", "Node", name)
            if name in plane.node_names:
                plane.node_names.remove(name)


class DeletionRecorder:
    """Watches driver pods; a loop is the deletions issued while no earlier deleted node is back and Ready."""

    def __init__(self, api: client.HttpApi, nodes: list[str]) -> None:
        self.objects = objects.K8sObjects(api)
        self.nodes = set(nodes)
        """Only these nodes count (pods left on nodes an earlier test deleted are garbage-collected meanwhile)."""
        self.loops: list[list[str]] = []
        self._open: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen_deleting: set[str] = set()
        self._version = ""
        self.max_in_flight = 0
        """The most driver pods deleted and not yet back Ready at any moment."""
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> DeletionRecorder:
        """Lists before returning, so every deletion after `start` is seen (the watch begins at that list)."""
        selector = f"{workloads.COMPONENT_LABEL}=driver"
        self._version = self.objects.list("v1", "Pod", namespace=NS, label_selector=selector).resource_version
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        selector = f"{workloads.COMPONENT_LABEL}=driver"
        version = self._version
        while not self._stop.is_set():
            for event in self.objects.watch(
                "v1", "Pod", namespace=NS, label_selector=selector, resource_version=version, timeout_seconds=5
            ):
                pod = event.object
                version = pod["metadata"].get("resourceVersion", version)
                uid, node = pod["metadata"].get("uid"), pod.get("spec", {}).get("nodeName")
                if node not in self.nodes:
                    continue
                deleting = bool(pod["metadata"].get("deletionTimestamp")) or event.type.value == "DELETED"
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or []
                )
                with self._lock:
                    if deleting and uid not in self._seen_deleting:
                        self._seen_deleting.add(uid)
                        if not self._open:
                            self.loops.append([])
                        self.loops[-1].append(node)
                        self._open.add(node)
                        self.max_in_flight = max(self.max_in_flight, len(self._open))
                    elif ready and not deleting and node in self._open:
                        self._open.discard(node)
                if self._stop.is_set():
                    return

    def snapshot(self) -> list[list[str]]:
        with self._lock:
            return [sorted(loop) for loop in self.loops]


def rollout_plan(policy: dict[str, Any], names: list[str], tmp: Path) -> list[list[str]]:
    """`metax-operator rollout plan -o json` for the same policy and node names: its loops, in order."""
    import json

    import yaml

    path = tmp / "plan.yaml"
    doc = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.14.6"}, "upgradePolicy": policy}}
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "rollout",
            "plan",
            "-f",
            str(path),
            "--node-names",
            ",".join(names),
            "-o",
            "json",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    plan = json.loads(out.stdout)
    return [sorted(batch) for step in plan["steps"] for batch in step["batches"]]


def confirm(kubeconfig: Path, step: int) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "rollout",
            "confirm",
            "--kubeconfig",
            str(kubeconfig),
            "--step",
            str(step),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


class StatusRecorder:
    """Watches cluster-operator: every ``status.upgradeStatus.status`` the API stored, in order."""

    def __init__(self, api: client.HttpApi) -> None:
        self.objects = objects.K8sObjects(api)
        self.stored: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._version = ""
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StatusRecorder:
        """Lists before returning, so every status written after `start` is seen."""
        self._version = self.objects.list(CR_API, "ClusterOperator").resource_version
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        version = self._version
        while not self._stop.is_set():
            for event in self.objects.watch(CR_API, "ClusterOperator", resource_version=version, timeout_seconds=5):
                version = event.object["metadata"].get("resourceVersion", version)
                step = ((event.object.get("status") or {}).get("upgradeStatus") or {}).get("status")
                if step:
                    with self._lock:
                        self.stored.append(dict(step))
                if self._stop.is_set():
                    return

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.stored)
