"""End to end on the real control plane: three kwok GPU nodes, each with its own fake host and its own set
of node agents (gpu-label, driver-manager, vfio-manager, gpu-device with the test kubelet) as local
processes, observed only through the Kubernetes API and the kubelet's view (C2, C3, C5, C10, R-LABELS,
R-DRIVER, R-VF, R-VFIO, R-READY).

One scenario, in the order an administrator lives it:
1. labels and HAMi's annotation appear on every node, and ``driver.ready`` where the driver loaded;
2. gpu-device advertises nothing until every required component is ready (container-runtime and maca
   have no agents yet: the test publishes their signals, as those agents will), then advertises 4 GPUs;
3. the third node is PreferCloud with its host driver in use: it says so (Event + readiness reason), keeps
   its driver, never advertises, and its driver-manager process keeps running (no crash loop);
4. editing ``driver-config`` (vfnum 2 for node 0) turns that node's 4 GPUs into 8 VFs: kubelet sees 8 GPUs;
5. editing ``metax-vfio-config`` (node 1, GPUs 0,1) moves two GPUs from ``gpu`` to ``vfio-gpu``;
6. steady state: over a quiet window, none of our field managers writes to any Node.

kwok nodes have no kubelet to turn a device list into ``status.allocatable``; the test kubelet's device
list (what a kubelet would make allocatable) stands for it.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from metax_core.cluster import configmaps
from metax_core.node import labels, readiness, vfio
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_dev import agents
from metax_dev.controlplane import cluster as controlplane
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_hw_fake import builder
from metax_k8s import client as metax_client
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

PAYLOAD = agents.PAYLOAD_VERSION
GPU, VFIO_GPU = "metax-tech.com/gpu", "metax-tech.com/vfio-gpu"
AGENTS = ("gpu_label", "driver_manager", "vfio_manager", "gpu_device")
OUR_MANAGERS = ("metax-gpu-label", "metax-driver-manager", "metax-vfio-manager", "metax-gpu-device")


class AgentNode:
    """One kwok node's host: a fake GPU host, a payload directory, a test kubelet, and four agent processes."""

    def __init__(self, name: str, workdir: pathlib.Path, kubeconfig: pathlib.Path, namespace: str) -> None:
        self.name = name
        self.dir = workdir / name
        self.fake = builder.FakeHostBuilder().gpus(4).host_driver("2.18.0").build(self.dir / "host")
        self.kubelet = Kubelet(self.fake.root / "var/lib/kubelet/device-plugins").start()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        payload = agents.write_payload(self.dir / "payload")
        self.env = agents.environment(
            self.fake, node_name=name, kubeconfig=kubeconfig, namespace=namespace, payload=payload
        )

    def start(self, agent: str) -> None:
        with (self.dir / f"{agent}.log").open("wb") as log:
            self.processes[agent] = subprocess.Popen(
                agents.command(agent.replace("_", "-")),
                env={**self.env, **agents.FAST[agent.replace("_", "-")]},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=pathlib.Path(__file__).resolve().parents[3],
            )

    def start_all(self) -> None:
        for agent in AGENTS:
            self.start(agent)

    def signals(self) -> dict[str, readiness.ComponentReadiness]:
        return hostfiles.FileReadinessBoard(self.fake.root).read_all()

    def publish(self, component: str) -> None:
        hostfiles.FileReadinessBoard(self.fake.root).publish(readiness.ComponentReadiness(component, True, "test"))

    def advertised(self, resource: str) -> int:
        return len(self.kubelet.healthy(resource))

    def alive(self) -> dict[str, int | None]:
        return {a: p.poll() for a, p in self.processes.items()}

    def log(self, agent: str) -> str:
        return (self.dir / f"{agent}.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.kubelet.stop()


@pytest.fixture
def fleet(control_plane: controlplane.ControlPlane, kube_namespace: str) -> Iterator[list[AgentNode]]:
    names = control_plane.add_nodes(3, prefix=f"gpu-{kube_namespace[3:9]}")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))  # unix socket paths: at most 107 bytes
    nodes = [AgentNode(n, workdir, control_plane.kubeconfig_path, kube_namespace) for n in names]
    nodes[2].fake.add_process(nodes[2].fake.gpu_addresses()[0], 4242, "inference-server")
    try:
        for n in nodes:
            n.start_all()
        yield nodes
    finally:
        for n in nodes:
            n.stop()
        core = client.CoreV1Api(control_plane.api_client())
        for name in names:
            core.delete_node(name)
            control_plane.node_names.remove(name)  # the session's node list holds only live nodes
        shutil.rmtree(workdir, ignore_errors=True)


def node_meta(core: client.CoreV1Api, name: str) -> Any:
    return core.read_node(name).metadata


def config_map(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    body = {"metadata": {"name": name, "namespace": namespace}, "data": data}
    try:
        core.replace_namespaced_config_map(name, namespace, body)
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        core.create_namespaced_config_map(namespace, body)


def our_write_times(core: client.CoreV1Api, names: list[str]) -> dict[tuple[str, str], str]:
    times: dict[tuple[str, str], str] = {}
    for name in names:
        for entry in node_meta(core, name).managed_fields or []:
            if entry.manager in OUR_MANAGERS:
                times[(name, entry.manager)] = str(entry.time)
    return times


def test_three_gpu_nodes_from_bare_to_advertised(
    fleet: list[AgentNode],
    control_plane: controlplane.ControlPlane,
    kube_namespace: str,
    record_timing: Callable[[str, float], None],
) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    ready_nodes, busy = fleet[:2], fleet[2]
    started = time.monotonic()

    # 1. driver.ready where the payload driver loaded, then labels and the HAMi annotation everywhere
    for n in ready_nodes:
        wait_for(
            f"{n.name} driver.ready",
            lambda n=n: (node_meta(core, n.name).labels or {}).get("metax-tech.com/driver.ready") == "true",
            timeout=120,
        )
        assert n.fake.module_version("metax") == PAYLOAD

    def hami(n: AgentNode) -> list[dict[str, Any]]:
        meta = node_meta(core, n.name)
        if (meta.labels or {}).get(labels.GPU_COUNT) != "4":
            return []
        entries: list[dict[str, Any]] = json.loads((meta.annotations or {}).get(labels.NODE_GPU_DEVICES, "[]"))
        return entries if len(entries) == 4 and all(d["healthy"] for d in entries) else []

    for n in fleet:
        wait_for(f"{n.name} labels and HAMi annotation", lambda n=n: hami(n), timeout=120)
    record_timing("agents e2e: bare to labelled and driver ready (3 nodes)", time.monotonic() - started)

    # 2. R-READY: nothing advertised before container-runtime and maca say ready
    time.sleep(2)  # a few gpu-device readiness rounds with gpu-label and driver ready
    assert all(n.kubelet.registered(GPU) == 0 for n in fleet)
    for n in fleet:
        n.publish("container-runtime")
        n.publish("maca")
    for n in ready_nodes:
        wait_for(f"{n.name} advertising 4 GPUs", lambda n=n: n.advertised(GPU) == 4, timeout=120)

    # 3. the PreferCloud node whose host driver is in use: reported, kept, not advertised, not crash-looping
    reason = wait_for("the busy node's driver signal", lambda: busy.signals().get("driver"), timeout=120)
    assert not reason.ready and "cannot unload metax 2.18.0" in reason.reason
    api = metax_client.HttpApi(metax_client.api_client(control_plane.kubeconfig_path))
    events = api.list("events.k8s.io/v1", "Event", namespace="default").items
    assert any(e.get("reason") == "HostDriverInUse" and e["regarding"]["name"] == busy.name for e in events)
    assert busy.fake.module_version("metax") == "2.18.0"
    assert busy.kubelet.registered(GPU) == 0
    assert "metax-tech.com/driver.ready" not in (node_meta(core, busy.name).labels or {})

    # 4. R-VF: driver-config vfnum 2 on node 0 → 8 VFs advertised there, node 1 unchanged
    edited = time.monotonic()
    config_map(core, kube_namespace, "driver-config", {"node-vfnums": f"nodes:\n  {fleet[0].name}:\n    vfnum: 2\n"})
    wait_for("8 VFs advertised on node 0", lambda: fleet[0].advertised(GPU) == 8, timeout=120)
    record_timing("agents e2e: driver-config VF edit to new advertised count", time.monotonic() - edited)
    wait_for(
        "gpu.vfnum=2", lambda: (node_meta(core, fleet[0].name).labels or {}).get(labels.GPU_VFNUM) == "2", timeout=120
    )
    assert fleet[1].advertised(GPU) == 4

    # 5. R-VFIO: metax-vfio-config, as the operator renders it from the CR's vfioManager.vfioConfig, moves
    #    GPUs 0,1 of node 1 to vfio-gpu (operator → agent: the test writes no format of its own)
    wanted = validation.parse(
        {
            "registry": REGISTRY_EXAMPLE,
            "driver": {"payload": {"version": PAYLOAD}},
            "vfioManager": {"vfioConfig": [{"nodeName": fleet[1].name, "gpus": "0,1"}]},
        }
    )
    rendered = configmaps.vfio_config_map(wanted, kube_namespace)
    config_map(core, kube_namespace, rendered["metadata"]["name"], rendered["data"])
    wait_for(
        "the gpu-vfio annotation",
        lambda: (node_meta(core, fleet[1].name).annotations or {}).get(vfio.ANNOTATION) == '{"0":1,"1":1}',
        timeout=120,
    )
    wait_for(
        "2 gpu + 2 vfio-gpu", lambda: fleet[1].advertised(VFIO_GPU) == 2 and fleet[1].advertised(GPU) == 2, timeout=120
    )

    # 6. steady state: no write by any of our field managers to any Node over a quiet window
    time.sleep(5)  # let the last rounds after the edits settle
    before = our_write_times(core, [n.name for n in fleet])
    time.sleep(15)
    assert our_write_times(core, [n.name for n in fleet]) == before
    assert all(code is None for n in fleet for code in n.alive().values()), {n.name: n.alive() for n in fleet}
    assert "Traceback" not in busy.log("driver_manager")
