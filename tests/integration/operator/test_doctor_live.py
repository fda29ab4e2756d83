"""``metax-operator doctor`` on a live install on the real control plane (R-DOCTOR, R-READY, R-DEP).

One install, reused by every case in the order an administrator meets them: the real operator as a process,
the session's kwok nodes (two GPU nodes, one CPU node; kwok runs the DaemonSets' pods and reports them Ready),
and on each node the real gpu-discovery agent (and on GPU nodes the real gpu-label and driver-manager) against its
own fake GPU host, as in test_uninstall_hosts.py. GPU node 0 loads the payload driver; GPU node 1 has no driver and a
fake kernel that refuses to load the payload's module (``Unknown symbol in module``, a fault of the fake
host). Doctor runs in-process with the admin kubeconfig (``main.main``, exactly the console script's code),
once as a ServiceAccount bound to the chart's read-only doctor ClusterRole, and once as ``kubectl metax doctor``
through the real kubectl's plugin lookup.

Cases, each checking the first broken link named, its evidence and the exit code:
- before install: cluster-operator is the first broken link, exit 1;
- GPU node 0: every link up to the first one that cannot hold here holds: a component whose agent is not built
  yet (no readinessProbe, no signal; read from the component table), or allocatable (kwok nodes have no kubelet
  to make the device plugin's GPUs allocatable), whichever comes first; the driver is loaded as wanted;
- GPU node 1: the driver link is named first, broken, with driver-manager's own Event ``DriverLoadFailed``;
- the CPU node: ``gpu-found`` first ("no MetaX GPU"); in the cluster summary it is counted, not failed;
- a component pod gone (node 0 tainted NoExecute: the taint manager evicts the DaemonSet pods and the
  DaemonSet controller does not put them back): gpu-discovery's pod link first, naming the taint;
- a prerequisite disabled (runtime off): the driver named first as blocked by it;
- the summary (no NODE) with ``-o json``: nodes per state, the CR's conditions, exit 1;
- an unknown node: exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core import components
from metax_core.cluster import rbac
from metax_core.cluster.doctor import chain
from metax_core.cluster.doctor import report as doctor_report
from metax_core.errors import ClusterError
from metax_core.node import labels as node_labels
from metax_core.spec import validation
from metax_core.wire import event_reasons
from metax_dev import agents
from metax_dev.controlplane import build
from metax_hw_fake import builder
from metax_k8s import client as metax_client
from services.cli import main

pytestmark = pytest.mark.integration

TAINT = {"key": "doctor-test", "value": "evict", "effect": "NoExecute"}
LOAD_FAILURE = "Unknown symbol in module, or unknown parameter (see dmesg)"


class Host:
    """One kwok node's fake host and its agent processes."""

    def __init__(self, name: str, workdir: pathlib.Path, kubeconfig: pathlib.Path, *, gpus: int, broken: bool):
        self.name = name
        self.dir = workdir / name
        self.fake = builder.FakeHostBuilder().gpus(gpus).host_driver(None).build(self.dir / "host")
        if broken:  # the kernel refuses the payload's module (metax_hw_fake's fault, as a real kernel's dmesg says)
            self.fake.fail_module_load(message=LOAD_FAILURE)
        payload = agents.write_payload(self.dir / "payload")
        self.env = agents.environment(self.fake, node_name=name, kubeconfig=kubeconfig, namespace=NS, payload=payload)
        self.agents = ("gpu-discovery", "gpu-label", "driver-manager") if gpus else ("gpu-discovery",)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for agent in self.agents:
            with (self.dir / f"{agent}.log").open("wb") as log:
                self.processes.append(
                    subprocess.Popen(
                        agents.command(agent),
                        env={**self.env, **agents.FAST[agent]},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=pathlib.Path(__file__).resolve().parents[3],
                    )
                )

    def stop(self) -> None:
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def hosts(operator_env: Env) -> Iterator[list[Host]]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="dr", dir="/tmp"))
    gpu0, gpu1 = operator_env.gpu_nodes
    made = [
        Host(gpu0, workdir, operator_env.kubeconfig, gpus=2, broken=False),
        Host(gpu1, workdir, operator_env.kubeconfig, gpus=2, broken=True),
        *(Host(n, workdir, operator_env.kubeconfig, gpus=0, broken=False) for n in operator_env.other_nodes),
    ]
    try:
        for h in made:
            h.start()
        yield made
    finally:
        for h in made:
            h.stop()
        with contextlib.suppress(ClusterError):
            _taint(operator_env, gpu0, None)
        shutil.rmtree(workdir, ignore_errors=True)


def doctor(capsys: pytest.CaptureFixture[str], kubeconfig: pathlib.Path, *nodes: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main.main(["doctor", *nodes, "-o", "json", "--kubeconfig", str(kubeconfig)])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def node_report(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in document["nodes"] if n["node"] == name)


def link(report: dict[str, Any], link_id: str) -> dict[str, Any]:
    return next(x for x in report["links"] if x["id"] == link_id)


def _taint(env: Env, node: str, taint: dict[str, str] | None) -> None:
    current = env.api.get("v1", "Node", node)
    others = [t for t in (current.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT["key"]]
    env.api.merge_patch("v1", "Node", node, {"spec": {"taints": others + ([taint] if taint else [])}})


def spec(**changes: Any) -> dict[str, Any]:
    return {"registry": "r.example.com", "driver": {"payload": {"version": agents.PAYLOAD_VERSION}}, **changes}


def test_doctor_names_the_first_broken_link_on_a_live_install(
    operator_env: Env, hosts: list[Host], capsys: pytest.CaptureFixture[str]
) -> None:
    env, kubeconfig = operator_env, operator_env.kubeconfig
    gpu0, gpu1, cpu = (h.name for h in hosts)

    code, document = doctor(capsys, kubeconfig, gpu0)
    assert code == doctor_report.EXIT_BROKEN
    first = node_report(document, gpu0)["firstBroken"]
    assert (first["id"], first["evidence"]) == (
        "cluster-operator",
        "no ClusterOperator cluster-operator: is the chart installed?",
    )

    env.start_operator()
    env.api.apply(cluster_operator(spec()), field_manager="helm")
    wait_for(
        "driver-manager loaded the payload on node 0, and refused it on node 1",
        lambda: (
            (labels := env.api.get("v1", "Node", gpu0)["metadata"].get("labels") or {}).get(node_labels.DRIVER_READY)
            == node_labels.TRUE
            and labels.get(node_labels.DRIVER_VERSION) == agents.PAYLOAD_VERSION
            and _events(env, gpu1, event_reasons.DRIVER_LOAD_FAILED)
        ),
        timeout=120,
    )
    for component in ("gpuLabel", "runtime", "driver"):
        wait_for(f"{component} pods on both GPU nodes", lambda c=component: _on(env, c, [gpu0, gpu1]), timeout=120)
    wait_for("gpu-discovery's pod on the CPU node", lambda: _on(env, "gpuLabel", [cpu]), timeout=120)
    wait_for("the operator's conditions on cluster-operator", lambda: env.condition("Degraded"), timeout=60)
    wait_for(
        "the CPU node without gpu.installed", lambda: node_labels.GPU_INSTALLED not in _labels(env, cpu), timeout=60
    )

    # GPU node 0: what holds, and the first broken link: the first component without an agent (no probe, read
    # from the table) or allocatable (kwok nodes have no kubelet to make the device plugin's GPUs allocatable)
    waiting = first_without_agent(spec())
    code, document = doctor(capsys, kubeconfig, gpu0)
    report = node_report(document, gpu0)
    assert code == doctor_report.EXIT_BROKEN
    ids = [x["id"] for x in report["links"]]
    expected = next(i for i in ids if i in (f"{waiting}-ready", "allocatable"))
    holding = ids[: ids.index(expected)]
    assert holding[:8] == [
        "cluster-operator",
        "operator",
        "node",
        "gpu-discovery-pod",
        "gpu-discovery-ready",
        "gpu-found",
        "gpu-label-pod",
        "gpu-label-ready",
    ]
    assert "container-runtime-ready" in holding and "driver-loaded" in holding
    assert all(link(report, i)["state"] == "holds" for i in holding), report
    assert link(report, "gpu-found")["evidence"].startswith(f"{node_labels.GPU_INSTALLED}=true: 2 x ")
    assert report["firstBroken"]["id"] == expected
    if expected == "allocatable":
        assert "allocatable metax-tech.com/gpu=0" in report["firstBroken"]["evidence"]
    else:
        assert "no readinessProbe" in report["firstBroken"]["evidence"]
    assert report["firstBroken"]["next"].startswith(f"kubectl -n {NS} logs pod/metax-")
    loaded = link(report, "driver-loaded")
    assert loaded["state"] == "holds" and f"{node_labels.DRIVER_VERSION}={agents.PAYLOAD_VERSION}" in loaded["evidence"]

    # GPU node 1: the driver's link broken, with driver-manager's Event
    code, document = doctor(capsys, kubeconfig, gpu1)
    loaded = link(node_report(document, gpu1), "driver-loaded")
    assert code == doctor_report.EXIT_BROKEN and loaded["state"] == "broken"
    assert (
        f"no label {node_labels.DRIVER_READY}=true; last Event {event_reasons.DRIVER_LOAD_FAILED}:"
        in loaded["evidence"]
    )
    assert LOAD_FAILURE in loaded["evidence"], loaded
    assert loaded["next"].startswith(f"kubectl -n {NS} logs pod/metax-driver-")
    assert node_report(document, gpu1)["firstBroken"]["id"] == "driver-loaded"  # nothing before it is missing

    # the CPU node
    code, document = doctor(capsys, kubeconfig, cpu)
    first = node_report(document, cpu)["firstBroken"]
    assert code == doctor_report.EXIT_BROKEN and first["id"] == "gpu-found"
    assert "gpu-discovery found no MetaX GPU" in first["evidence"]

    # the summary: every node, the CPU node counted and not failed
    code, document = doctor(capsys, kubeconfig)
    states = document["summary"]["nodes"]
    assert cpu in states[doctor_report.NO_GPU], states
    assert gpu0 in states[f"broken: {expected}"], states
    assert {c["type"] for c in document["summary"]["clusterOperator"]["conditions"]} >= {"Ready", "Degraded"}
    assert code == doctor_report.EXIT_BROKEN

    # the same through kubectl's plugin mechanism: `kubectl metax doctor` runs the kubectl-metax console script
    kubectl = str(build.build(quiet=True).binary("kubectl"))
    venv_bin = str(pathlib.Path(sys.executable).parent)
    plugin = subprocess.run(
        [kubectl, "metax", "doctor", gpu1, "-o", "json", "--kubeconfig", str(kubeconfig)],
        check=False,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plugin.returncode == doctor_report.EXIT_BROKEN, plugin.stderr
    assert link(node_report(json.loads(plugin.stdout), gpu1), "driver-loaded")["state"] == "broken"

    # an unknown node
    assert doctor(capsys, kubeconfig, "no-such-node")[0] == doctor_report.EXIT_USAGE

    # a component pod gone: the node tainted NoExecute, the taint manager evicts the DaemonSet pods
    _taint(env, gpu0, TAINT)
    wait_for("gpu-label's pods evicted from node 0", lambda: not _on(env, "gpuLabel", [gpu0]), timeout=120)
    code, document = doctor(capsys, kubeconfig, gpu0)
    first = node_report(document, gpu0)["firstBroken"]
    assert code == doctor_report.EXIT_BROKEN and first["id"] == "gpu-discovery-pod", first
    assert "does not tolerate the node's taint(s) doctor-test=evict:NoExecute" in first["evidence"]
    assert first["next"] == f"kubectl -n {NS} describe daemonset/metax-gpu-discovery"
    _taint(env, gpu0, None)

    # a prerequisite disabled
    env.api.apply(cluster_operator(spec(runtime={"deploy": False})), field_manager="helm")
    wait_for("the operator reconciled the edit", lambda: _observed(env), timeout=60)
    code, document = doctor(capsys, kubeconfig, gpu0)
    first = node_report(document, gpu0)["firstBroken"]
    assert code == doctor_report.EXIT_BROKEN and first["id"] == "driver-deployed", first
    assert first["evidence"] == "driver is enabled but not deployed: disabled prerequisite runtime"

    # as a ServiceAccount with only the chart's read-only doctor ClusterRole
    sa_kubeconfig = _doctor_identity(env)
    code, document = doctor(capsys, sa_kubeconfig, gpu0)
    assert code == doctor_report.EXIT_BROKEN and node_report(document, gpu0)["firstBroken"]["id"] == "driver-deployed"
    code, document = doctor(capsys, sa_kubeconfig)
    assert code == doctor_report.EXIT_BROKEN and cpu in document["summary"]["nodes"][doctor_report.NO_GPU]


def first_without_agent(spec_document: dict[str, Any]) -> str | None:
    """The first node component of the chain whose DaemonSet declares no readiness probe (its agent is not
    built yet): on a node where everything else works, doctor names its missing signal first."""
    plan = components.plan(components.enabled(validation.parse(spec_document)))
    for component in chain.chain_order(plan):
        info = components.BY_COMPONENT[component]
        if info.probe is None and any(w.kind is components.WorkloadKind.DAEMON_SET for w in info.workloads):
            return info.signal
    return None


def _observed(env: Env) -> bool:
    cr = env.cr()
    return bool((cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"])


def _labels(env: Env, node: str) -> dict[str, str]:
    return dict(env.api.get("v1", "Node", node)["metadata"].get("labels") or {})


def _events(env: Env, node: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in env.api.list("events.k8s.io/v1", "Event", namespace="default").items
        if e.get("reason") == reason and (e.get("regarding") or {}).get("name") == node
    ]


def _on(env: Env, component: str, nodes: list[str]) -> bool:
    live = {p["spec"].get("nodeName") for p in env.pods(component) if not p["metadata"].get("deletionTimestamp")}
    return all(n in live for n in nodes)


def _doctor_identity(env: Env) -> pathlib.Path:
    """A kubeconfig for the doctor's ServiceAccount, with the roles the chart installs (`rbac.doctor_objects`,
    from the same rules as templates/doctor-rbac.yaml) and a TokenRequest token."""
    for obj in rbac.doctor_objects(NS, {"app.kubernetes.io/name": "doctor-test"}):
        with contextlib.suppress(ClusterError):
            env.api.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        env.api.create(obj)
    core = kubernetes.client.CoreV1Api(metax_client.api_client(env.kubeconfig))
    request = kubernetes.client.AuthenticationV1TokenRequest(
        spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = core.create_namespaced_service_account_token(rbac.DOCTOR_ACCOUNT, NS, request).status.token
    admin = yaml.safe_load(env.kubeconfig.read_text())
    admin["users"] = [{"name": "doctor", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "doctor"
    written = env.log_dir / "doctor.kubeconfig"
    written.write_text(yaml.safe_dump(admin))
    return written
