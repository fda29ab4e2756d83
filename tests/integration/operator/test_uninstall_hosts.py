"""Uninstall on the real control plane leaves every fake host as it was found (R-INSTALL, "files it wrote
included").

The operator runs as a process (its finalizer for real); two kwok GPU nodes each get a fake host and the node
agents as local processes, as in tests/integration/agents/test_nodes_on_cluster.py (the kwok pods of the operator's
DaemonSets stand for them in the API, so the finalizer waits for them by those pods). Node 0 had its own driver
2.18.0 loaded with parameters before install; node 1 had no driver loaded; the third kwok node is a CPU node where
only gpu-discovery runs (its DaemonSet runs on every node, and answers no uninstall request: the finalizer does
not wait for it, and its host stays untouched). Installed: the payload driver with ``xcore_page_size: 4`` from
driver-config, 2 VFs per GPU on node 0, devices advertised to each node's test kubelet with a CDI spec. Then
``cluster-operator`` is deleted.
Covers: the CR goes only after every agent answered (no ``UninstallIncomplete``); each host tree is
byte-identical to before install except what docs/operator.md says stays (the empty CDI directory); node 0
runs its own 2.18.0 with its own parameters again and no VFs, node 1 has no ``metax`` module; no product key
is left on the nodes; the agents, still running, change nothing afterwards.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from operator_helpers import CR_API, NS, Env, cluster_operator, wait_for

from metax_core.node import readiness, uninstall
from metax_dev import agents
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_hw_fake import builder, snapshot
from metax_k8s.nodes import K8sNodeMetadata

pytestmark = pytest.mark.integration

GPU = "metax-tech.com/gpu"
AGENTS = ("gpu-discovery", "gpu-label", "driver-manager", "vfio-manager", "gpu-device", "maca")
STAND_INS = ("container-runtime",)
STAYS = {"run/cdi": "dir 0o755"}
"""docs/operator.md, "Uninstall": the CDI spec directory stays, empty (a tmpfs directory other CDI producers share)."""
HOST_PARAMS = {"xcore_page_size": "0"}


class Host:
    """One kwok node's fake host, its test kubelet and its agent processes."""

    def __init__(
        self, name: str, workdir: pathlib.Path, kubeconfig: pathlib.Path, *, driver: bool, gpus: int = 2
    ) -> None:
        self.name = name
        self.dir = workdir / name
        self.agents = AGENTS if gpus else ("gpu-discovery",)  # on a CPU node only gpu-discovery's DaemonSet runs
        spec = builder.FakeHostBuilder().gpus(gpus)
        spec = spec.host_driver("2.18.0", params=HOST_PARAMS) if driver else spec.host_driver(None)
        self.fake = spec.build(self.dir / "host")
        self.kubelet = Kubelet(self.fake.root / "var/lib/kubelet/device-plugins").start()  # there before install
        self.before = snapshot.take(self.fake.root)
        self.module_before = (self.fake.module_version("metax"), self.fake.module_params("metax"))
        payload = agents.write_payload(self.dir / "payload")
        self.env = agents.environment(self.fake, node_name=name, kubeconfig=kubeconfig, namespace=NS, payload=payload)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        for agent in self.agents:
            with (self.dir / f"{agent}.log").open("wb") as log:
                self.processes[agent] = subprocess.Popen(
                    agents.command(agent),
                    env={**self.env, **agents.FAST[agent]},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=pathlib.Path(__file__).resolve().parents[3],
                )

    def board(self) -> hostfiles.FileReadinessBoard:
        return hostfiles.FileReadinessBoard(self.fake.root)

    def after(self) -> list[str]:
        stays = STAYS if "gpu-device" in self.agents else {}
        return snapshot.diff({**self.before, **stays}, snapshot.take(self.fake.root))

    def logs(self) -> str:
        return "\n".join(f"--- {a}\n{(self.dir / f'{a}.log').read_text(errors='replace')[-3000:]}" for a in self.agents)

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
def hosts(operator_env: Env) -> Iterator[list[Host]]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="uh", dir="/tmp"))  # unix socket paths: at most 107 bytes
    made = [
        Host(name, workdir, operator_env.kubeconfig, driver=i == 0) for i, name in enumerate(operator_env.gpu_nodes)
    ]
    made += [Host(name, workdir, operator_env.kubeconfig, driver=False, gpus=0) for name in operator_env.other_nodes]
    try:
        for h in made:
            h.start()
        yield made
    finally:
        for h in made:
            h.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def annotations(env: Env, node: str) -> dict[str, str]:
    return dict(env.api.get("v1", "Node", node)["metadata"].get("annotations") or {})


def product_keys(env: Env, node: str) -> list[str]:
    metadata = env.api.get("v1", "Node", node)["metadata"]
    keys = [*(metadata.get("labels") or {}), *(metadata.get("annotations") or {})]
    return [k for k in keys if k.startswith(uninstall.PREFIX) and not k.startswith("metax-tech.com/gpu-device.")]


def gone(env: Env) -> bool:
    return not env.api.list(CR_API, "ClusterOperator").items


def test_uninstall_leaves_every_fake_host_as_it_was_found(operator_env: Env, hosts: list[Host]) -> None:
    env = operator_env
    n0, n1, cpu = hosts
    env.start_operator(METAX_UNINSTALL_TIMEOUT="150")  # real agents answer here: the production-like wait
    env.api.apply(
        cluster_operator({"registry": "r.example.com", "driver": {"payload": {"version": agents.PAYLOAD_VERSION}}}),
        field_manager="helm",
    )
    wait_for("driver-config", lambda: env.api.list("v1", "ConfigMap", namespace=NS).items and _driver_config(env))
    data = {"node-vfnums": f"nodes:\n  {n0.name}:\n    vfnum: 2\n", "module-params": "xcore_page_size: 4\n"}
    env.api.merge_patch("v1", "ConfigMap", "driver-config", {"data": data}, namespace=NS)
    for h in (n0, n1):
        wait_for(
            f"{h.name}: payload driver with xcore_page_size 4",
            lambda h=h: (
                (h.fake.module_params("metax") or {}).get("xcore_page_size") == "4"
                and h.fake.module_version("metax") == agents.PAYLOAD_VERSION
            ),
            timeout=120,
        )
        for component in STAND_INS:
            h.board().publish(readiness.ComponentReadiness(component, True, "stand-in"))
    wait_for("4 VFs advertised on node 0", lambda: len(n0.kubelet.healthy(GPU)) == 4, timeout=120)
    wait_for("2 GPUs advertised on node 1", lambda: len(n1.kubelet.healthy(GPU)) == 2, timeout=120)
    for component in ("gpuLabel", "driver", "gpuDevice"):
        wait_for(f"{component} pods on both GPU nodes", lambda c=component: _on_both(env, c, [n0, n1]), timeout=120)
    assert n0.after() and n1.after()  # the install changed each GPU host

    for h in (n0, n1):
        for component in STAND_INS:  # what those agents will withdraw themselves
            h.board().withdraw(component)
    started = time.monotonic()
    uid = env.cr()["metadata"]["uid"]  # this install's: earlier tests' uninstalls leave their own Events
    stand_in = StandInAnswers(env, [n0.name, n1.name])
    stand_in.thread.start()
    env.api.delete(CR_API, "ClusterOperator", "cluster-operator")
    # not polled for the request: with agents that answer at once, the whole finalizer may be over before
    # a poll sees it; the restored hosts below are what only the request makes the agents do
    try:
        wait_for("cluster-operator gone", lambda: gone(env), timeout=150)
    except AssertionError:
        raise AssertionError("\n".join(h.logs() for h in hosts)) from None
    took = time.monotonic() - started
    stand_in.stop.set()
    incomplete = [
        e
        for e in env.api.list("events.k8s.io/v1", "Event", namespace="default").items
        if e.get("reason") == uninstall.INCOMPLETE_REASON and (e.get("regarding") or {}).get("uid") == uid
    ]
    assert incomplete == [], incomplete[-1]["note"]
    assert took < 150

    for h in hosts:
        assert h.after() == [], f"{h.name}\n" + "\n".join(h.after())
        assert (h.fake.module_version("metax"), h.fake.module_params("metax")) == h.module_before
        assert h.fake.audit() == []
        assert product_keys(env, h.name) == []
    assert n0.fake.vfs_of(n0.fake.gpu_addresses()[0]) == []
    assert cpu.fake.gpu_addresses() == []
    time.sleep(5)  # the agents still run (no kubelet kills kwok's pods' stand-ins): they change nothing
    for h in hosts:
        assert all(p.poll() is None for p in h.processes.values()), h.logs()
        assert h.after() == [] and product_keys(env, h.name) == []


class StandInAnswers:
    """container-runtime's agent needs a real containerd, which kwok nodes lack (its own tests run it on real
    ones: tests/containerruntime, tests/realnode/test_container_runtime.py): this thread answers the uninstall
    for it on each GPU node, as that agent does once it has undone its edits."""

    def __init__(self, env: Env, nodes: list[str]) -> None:
        self.metadata = K8sNodeMetadata(env.api, field_manager="metax-container-runtime")
        self.nodes = nodes
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for name in self.nodes:
                node = self.metadata.get_node(name) or {}
                annotations = (node.get("metadata") or {}).get("annotations") or {}
                uid = uninstall.requested(annotations)
                done = uninstall.render_done("container-runtime", uninstall.Done(uid)) if uid else {}
                if uid and not set(done) <= set(annotations):
                    self.metadata.patch_node_metadata(name, annotations=done)


def _driver_config(env: Env) -> Any:
    return [c for c in env.api.list("v1", "ConfigMap", namespace=NS).items if c["metadata"]["name"] == "driver-config"]


def _on_both(env: Env, component: str, hosts: list[Host]) -> bool:
    nodes = {p["spec"].get("nodeName") for p in env.pods(component)}
    return all(h.name in nodes for h in hosts)
