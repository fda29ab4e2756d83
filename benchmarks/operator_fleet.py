"""The operator benchmarks' harness: a kwok fleet on the loopback control plane, the operator as the chart runs it.

Why this module exists: `benchmarks.operator_scale` measures a full P1/P2/P3 row up to 1,000 nodes and P3 alone
above; both need the same pieces, kept here so each row reads as what it measures. They are: the CRD and the
components' ServiceAccounts (`prepare`), the GPU label gpu-label would publish, the ClusterOperator the chart's
``helm install`` applies (`apply_cr`), the operator as a subprocess with the chart Deployment's environment
(`operator_process`), what the fleet says (every DaemonSet's pods Ready or bound, `fleet_says` when it times
out), and the operator process's peak RSS and CPU from /proc.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import kubernetes

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metax_core import components
from metax_core.cluster import workloads
from metax_core.spec import model as spec
from metax_core.wire import meta
from metax_dev.controlplane import cluster
from metax_k8s import client, crd

NS = spec.NAMESPACE
CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
SPEC = {"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.14.6"}}}


def all_ready(api: client.HttpApi, gpu_nodes: int) -> bool:
    items = api.list("apps/v1", "DaemonSet", namespace=NS).items
    if not items:
        return False
    for ds in items:
        st = ds.get("status") or {}
        want = st.get("desiredNumberScheduled", -1)
        if want < gpu_nodes or st.get("numberReady") != want or st.get("updatedNumberScheduled") != want:
            return False
    return True


def wait(what: str, check: Any, timeout: float = 1800.0, explain: Any = None, interval: float = 0.5) -> float:
    """Seconds until ``check()``; after ``timeout``, exit naming ``what`` and what ``explain()`` says."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise SystemExit(f"timed out waiting for {what}" + (f": {explain()}" if explain is not None else ""))
        time.sleep(interval)
    return time.monotonic() - began


def all_bound(api: client.HttpApi, gpu_nodes: int) -> bool:
    """Every DaemonSet has its pod for every GPU node, and no pod of ours waits for the scheduler."""
    items = api.list("apps/v1", "DaemonSet", namespace=NS).items
    for ds in items:
        st = ds.get("status") or {}
        if st.get("desiredNumberScheduled", -1) < gpu_nodes or st.get("currentNumberScheduled") != st.get(
            "desiredNumberScheduled"
        ):
            return False
    return bool(items) and not api.list("v1", "Pod", namespace=NS, field_selector="spec.nodeName=").items


def fleet_says(api: client.HttpApi) -> str:
    """Each DaemonSet's desired/ready/updated pods, the Nodes not Ready, and the pods the node lifecycle controller
    marked not Ready (a kwok falling behind its node heartbeats makes it do so)."""
    sets = [
        f"{ds['metadata']['name']} {st.get('desiredNumberScheduled')}/{st.get('numberReady')}/"
        f"{st.get('updatedNumberScheduled')}"
        for ds in api.list("apps/v1", "DaemonSet", namespace=NS).items
        for st in [ds.get("status") or {}]
    ]
    not_ready = [
        n["metadata"]["name"]
        for n in api.list("v1", "Node").items
        if not any(
            c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or []
        )
    ]
    marked = [
        p["metadata"]["name"]
        for p in api.list("v1", "Pod", namespace=NS).items
        for conditions in [{c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or []}]
        if conditions.get("Ready") == "False" and conditions.get("ContainersReady") == "True"
    ]
    return (
        f"DaemonSets desired/ready/updated: {', '.join(sets)}; Nodes not Ready: {len(not_ready)} {not_ready[:5]}; "
        f"pods not Ready with every container ready (marked so when their node was NotReady; kwok never marks them "
        f"Ready again): {len(marked)} {marked[:3]}"
    )


def prepare(api: client.HttpApi) -> None:
    api.apply(crd.crd(), field_manager="bench", force=True)
    with contextlib.suppress(Exception):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # The floor applies DaemonSets without the operator, so their ServiceAccounts come first; labelled as the
    # operator labels its own, so the operator phase adopts them instead of refusing to touch them.
    for name in sorted({w.service_account for i in components.CATALOGUE for w in i.workloads if w.service_account}):
        labels = {meta.MANAGED_BY_LABEL: meta.MANAGED_BY}
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": NS, "labels": labels},
            },
            field_manager="bench",
        )
    wait("CRD served", lambda: _served(api))


def _served(api: client.HttpApi) -> bool:
    try:
        api.list(CR_API, spec.KIND)
    except Exception:
        return False
    return True


CLEAR_TIMEOUT = 1800.0
"""Seconds `clear` waits for the namespace's pods to be gone."""


def clear(api: client.HttpApi) -> None:
    """Delete the fleet's workloads and their pods, and wait until no pod is left, so the next row starts empty.

    The pods are deleted at once (one collection delete, grace period 0), not left to the garbage collector and
    kwok: at 5,000 nodes the floor's 35,000 pods took that path 20 minutes to get half way, with this wait's own
    polls — a list of every pod each — in the API server's way. Each poll now asks for one pod (``limit=1``).
    """
    for ds in api.list("apps/v1", "DaemonSet", namespace=NS).items:
        api.delete("apps/v1", "DaemonSet", ds["metadata"]["name"], NS)
    for d in api.list("apps/v1", "Deployment", namespace=NS).items:
        api.delete("apps/v1", "Deployment", d["metadata"]["name"], NS)
    core = kubernetes.client.CoreV1Api(api.client)

    def gone() -> bool:
        if not core.list_namespaced_pod(NS, limit=1).items:
            return True
        # A workload's controller may still have been creating pods when it was deleted: deleted too, next poll.
        core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
        return False

    wait("pods gone", gone, timeout=CLEAR_TIMEOUT, interval=2.0)


def chart_env() -> dict[str, str]:
    """The allocator settings the chart's Deployment gives the operator (its ``env`` list), read from the chart."""
    text = (ROOT / "charts" / "metax-operator" / "templates" / "deployment.yaml").read_text()
    found = re.findall(r"- name: (MALLOC_\w+|PYTHON\w+)\s+value: \"?([^\"\n]+)\"?", text)
    return dict(found)


CHART_ENV = chart_env()


@contextlib.contextmanager
def operator_process(kubeconfig: pathlib.Path, extra: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "METAX_IDENTITY": "bench", "METAX_LEADER_ELECTION": "false"}
    env["METAX_UNINSTALL_TIMEOUT"] = str(UNDO_WAIT)
    env.update(extra)
    proc = subprocess.Popen([sys.executable, "-m", "services.operator"], env=env, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:  # as the kubelet does after a pod's grace period
            print(f"the operator did not stop within {STOP_GRACE:.0f} s of SIGTERM: killed", flush=True)
            proc.kill()
            proc.wait()


STOP_GRACE = 30.0
"""Seconds an operator gets after SIGTERM before SIGKILL (a pod's default grace period). At 5,000 nodes on a loaded
2-core machine a restarted operator still listing took longer, and the first try of that row lost its figures."""


def peak_rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far, from /proc (clock ticks)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def label_gpu_nodes(api: client.HttpApi) -> None:
    """What gpu-label would publish; the operator's finalizer removes it with every other product key."""
    for node in api.list("v1", "Node").items:
        labels = node["metadata"].get("labels") or {}
        if labels.get(workloads.GPU_NODE_LABEL) != "true":
            patch = {"metadata": {"labels": {workloads.GPU_NODE_LABEL: "true"}}}
            api.merge_patch("v1", "Node", node["metadata"]["name"], patch)


def delete_cr(api: client.HttpApi) -> None:
    with contextlib.suppress(Exception):
        api.delete(CR_API, spec.KIND, spec.OBJECT_NAME)
    wait("CR gone", lambda: not api.list(CR_API, spec.KIND).items, timeout=1800)


UNDO_WAIT = 5.0
"""Seconds the finalizer waits for the node agents' undo on CR deletion (production: 180 s). kwok nodes run no
agents, so nothing would answer: the teardown between rows is not measured, and would wait the full 180 s."""


RESTART_SETTLE = 30.0
"""Seconds a restarted operator gets at least before its peak RSS is read (`settled`)."""
QUIET_WINDOW = 10.0
QUIET_CPU = 0.2
"""A restarted operator is settled once it spent less than `QUIET_CPU` CPU seconds over `QUIET_WINDOW` seconds."""


def settled(pid: int, timeout: float = 1800.0) -> float:
    """Seconds until the operator ``pid`` has gone quiet (and at least `RESTART_SETTLE`): it has listed every node
    and pod and reconciled, so its peak RSS is the restart's. A fixed wait read a 5,000-node restart before its
    40,001 pods were listed (RESULTS.md run 15: 62.1 MiB, below the 1,000-node restart's 62.3)."""
    began = time.monotonic()
    time.sleep(RESTART_SETTLE)
    spent = cpu_seconds(pid)
    while True:
        time.sleep(QUIET_WINDOW)
        now = cpu_seconds(pid)
        if now - spent < QUIET_CPU:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise SystemExit(f"the restarted operator did not go quiet within {timeout:.0f} s")
        spent = now


def apply_cr(api: client.HttpApi) -> None:
    """The ClusterOperator with `SPEC`, as ``helm install`` applies it."""
    api.apply(
        {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": SPEC},
        field_manager="helm",
    )


@contextlib.contextmanager
def gpu_fleet(nodes: int, **plane: Any) -> Iterator[tuple[cluster.ControlPlane, client.HttpApi]]:
    """A control plane with ``nodes`` kwok GPU nodes (``plane``: more `cluster.ControlPlane` arguments), `prepare`d
    and labelled as gpu-label would, and a client of it."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        cluster.ControlPlane(
            nodes=nodes, node_labels={workloads.GPU_NODE_LABEL: "true"}, workdir_parent=pathlib.Path(tmp), **plane
        ) as control_plane,
    ):
        api = client.HttpApi(client.api_client(control_plane.kubeconfig_path), user_agent="bench")
        prepare(api)
        label_gpu_nodes(api)
        yield control_plane, api


def install(api: client.HttpApi, kubeconfig: pathlib.Path, nodes: int, extra: dict[str, str]) -> float:
    """The operator with ``extra`` installs `SPEC` (`apply_cr`); the seconds until every pod of it is Ready, after
    which that operator is stopped."""
    with operator_process(kubeconfig, extra):
        time.sleep(2)  # informers synced
        apply_cr(api)
        return wait("every pod Ready", lambda: all_ready(api, nodes), explain=lambda: fleet_says(api))
