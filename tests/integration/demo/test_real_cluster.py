"""`metax-dev demo --cluster real` (issue 26 item 2): the demo's scenario on the real control plane, end to end.

The demo runs on the session's control plane (its ``control_plane`` parameter, instead of starting a second
one): two GPU nodes that are process nodes running the operator's DaemonSet pods against fake GPU hosts, two
kwok CPU nodes, the operator as a process. Covers, read from the API and the fake hosts (never from the
demo's output): every step reaches its outcome (exit 0); every GPU node ran every node component's pod and the
CPU nodes only gpu-label's; the kubeconfig the watch command names defaults to the operator's namespace;
afterwards every host is byte-identical to before install (the CDI directory apart
on GPU nodes), its own driver loaded again; no ClusterOperator, DaemonSet, pod or Node of the demo is left,
no object of the operator's in its namespace (what the API server makes there itself apart), and the
session's kwok nodes are as they were.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from metax_core.cluster import workloads
from metax_core.components import Component
from metax_dev import demo
from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import realfleet, scenario
from metax_k8s import client

pytestmark = pytest.mark.integration

NODE_COMPONENTS = {c.value for c in realfleet.AGENT_OF}


class Recorder:
    """What the cluster ran where while the demo ran (the API's pods, polled), and the hosts at the end."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.changed: dict[str, list[str]] = {}
        self.modules: dict[str, str | None] = {}
        self.nodes: list[str] = []
        self.kubeconfig: dict[str, Any] = {}
        self._done = threading.Event()

    def prepare(self, f: demo_fleet.Fleet) -> None:
        self.nodes = [n.name for n in [*f.nodes, *f.cpu_nodes]]
        self.kubeconfig = json.loads((f.workdir / "kubeconfig").read_text())  # what the watch command uses
        threading.Thread(target=self._watch, args=(f,), daemon=True).start()
        original = f.stop

        def stop() -> None:
            self._done.set()
            for n in [*f.nodes, *f.cpu_nodes]:  # from the hosts themselves, before the demo removes them
                self.changed[n.name] = n.changes(allowed=scenario.STAYS if n.gpus else None)
                self.modules[n.name] = n.fake.module_version("metax")
            original()

        f.stop = stop  # type: ignore[method-assign]

    def _watch(self, f: demo_fleet.Fleet) -> None:
        while not self._done.wait(0.5):
            for pod in f.api.list("v1", "Pod", namespace=f.ns).items:
                component = (pod["metadata"].get("labels") or {}).get(workloads.COMPONENT_LABEL)
                if component:
                    self.seen.add((pod["spec"].get("nodeName", ""), component))

    def components_on(self, node: str) -> set[str]:
        return {component for name, component in self.seen if name == node}


def test_the_demo_scenario_passes_on_the_real_control_plane(
    control_plane: controlplane.ControlPlane, record_timing: Callable[[str, float], None]
) -> None:
    kwok_before = sorted(control_plane.node_names)
    recorder = Recorder()
    started = time.monotonic()
    code = demo.main(
        ["--cluster", "real", "--no-live", "--nodes", "2"], prepare=recorder.prepare, control_plane=control_plane
    )
    record_timing("demo --cluster real, 2 GPU + 2 CPU nodes", time.monotonic() - started)
    assert code == 0

    gpu_nodes, cpu_nodes = recorder.nodes[:2], recorder.nodes[2:]
    assert len(cpu_nodes) == realfleet.CPU_NODES
    for name in gpu_nodes:
        assert recorder.components_on(name) == NODE_COMPONENTS, name
        assert recorder.modules[name] == demo_fleet.HOST_DRIVER
    for name in cpu_nodes:
        assert recorder.components_on(name) == {Component.GPU_LABEL.value}, name
        assert recorder.modules[name] is None
    assert recorder.changed == {name: [] for name in recorder.nodes}
    assert [c["context"]["namespace"] for c in recorder.kubeconfig["contexts"]] == [demo_fleet.NAMESPACE]

    api = client.HttpApi(client.api_client(control_plane.kubeconfig_path))
    assert api.list(scenario.CR_API, "ClusterOperator").items == []
    left = {
        (kind, obj["metadata"]["name"])
        for api_version, kind in (
            ("apps/v1", "DaemonSet"),
            ("v1", "Pod"),
            ("v1", "ConfigMap"),
            ("v1", "ServiceAccount"),
        )
        for obj in api.list(api_version, kind, namespace=demo_fleet.NAMESPACE).items
    }
    assert left <= {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}, left
    nodes = {n["metadata"]["name"] for n in api.list("v1", "Node").items}
    assert nodes.isdisjoint(recorder.nodes)
    assert [p for p in api.list("v1", "Pod").items if p["spec"].get("nodeName") in recorder.nodes] == []
    assert sorted(control_plane.node_names) == kwok_before
