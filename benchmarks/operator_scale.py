"""The operator at scale on the loopback control plane: P1 install time, P2 steady-state requests, P3 RSS.

Why this module exists: issue 11 sets three goals that tests must not time — CR created → every GPU node's
pods Ready within 1.5× the floor (the same DaemonSets applied directly, no operator); zero writes in steady
state; peak RSS ≤ 100 MiB at 1,000 nodes. Issue 26 tightened them: P1 ≤ 1.2× the floor at 1,000 and 5,000
nodes, P3 ≤ 100 MiB at 5,000 (the goals `figures()` checks). Nothing is asserted; the tables are the result.

Run from the repository root::

    python -m benchmarks.operator_scale [--nodes 100 500 1000] [--steady 300] [--env MALLOC_ARENA_MAX=2]

- One control plane grows through the node counts given (kwok nodes added between rows), so every row's
  floor and operator run on the same API server. The three rows take about 25 minutes on 2 shared cores; pass
  ``--nodes 100 500`` for a quicker look.
- P1 (per node count): the floor applies the rendered DaemonSets directly and waits until every one reports
  all pods Ready; then the operator (a subprocess, started as the chart starts it: `services.operator`
  with the Deployment's environment, see `CHART_ENV`) gets the ClusterOperator and the same wait runs. Both
  on the same control plane, one after the other.
- P2: the operator runs in-process with a counting `Api` wrapper for ``--steady`` seconds, at the largest node
  count (``--steady 0`` skips it; ``--steady-each``: at every count): started onto the cluster the P1 operator
  installed (the CR applied again unchanged), counted after ``RESTART_SETTLE`` seconds; requests and writes
  are counted per verb on the client side (the API server's metrics carry no user agent).
- P3: the operator subprocess's VmHWM (peak RSS) from /proc after P1, its whole life included (informers'
  initial lists, the install, the reconciles that follow); and the same for an operator restarted onto the
  installed cluster (its informers list every node and all its pods at once), ``RESTART_SETTLE`` seconds on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_core.cluster import components, workloads
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_k8s import client, crd
from services.operator import bootstrap, settings

NS = spec.NAMESPACE
CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
SPEC = {"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.14.6"}}}
WRITES = {"create", "replace", "merge_patch", "apply", "delete"}


class CountingApi:
    """An `Api` that counts every call by verb (P2)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.counting = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name not in {"get", "list", "watch", "create", "replace", "merge_patch", "apply", "delete"}:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.counting:
                self.calls[name] += 1
            return target(*args, **kwargs)

        return call


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
    """Each DaemonSet's desired/ready/updated pods and the Nodes not Ready (a kwok falling behind its node
    heartbeats makes the node lifecycle controller mark their pods not Ready)."""
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
    return f"DaemonSets desired/ready/updated: {', '.join(sets)}; Nodes not Ready: {len(not_ready)} {not_ready[:5]}"


def prepare(api: client.HttpApi) -> None:
    api.apply(crd.crd(), field_manager="bench", force=True)
    with contextlib.suppress(Exception):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # The floor applies DaemonSets without the operator, so their ServiceAccounts come first; labelled as the
    # operator labels its own, so the operator phase adopts them instead of refusing to touch them.
    for name in sorted({w.service_account for i in components.CATALOGUE for w in i.workloads if w.service_account}):
        labels = {"app.kubernetes.io/managed-by": "metax-operator"}
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


def clear(api: client.HttpApi) -> None:
    for ds in api.list("apps/v1", "DaemonSet", namespace=NS).items:
        api.delete("apps/v1", "DaemonSet", ds["metadata"]["name"], NS)
    for d in api.list("apps/v1", "Deployment", namespace=NS).items:
        api.delete("apps/v1", "Deployment", d["metadata"]["name"], NS)
    wait("pods gone", lambda: not api.list("v1", "Pod", namespace=NS).items)


def floor(api: client.HttpApi, nodes: int) -> float:
    label_gpu_nodes(api)  # the previous row's operator removed the product's labels when its CR was deleted
    rendered = workloads.render(validation.parse(SPEC))
    began = time.monotonic()
    for obj in rendered.objects:
        api.apply(obj, field_manager="bench-floor", force=True)
    wait("floor ready", lambda: all_ready(api, nodes), explain=lambda: fleet_says(api))
    took = time.monotonic() - began
    clear(api)
    return took


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
"""Seconds a restarted operator gets to list everything and reconcile once before its peak RSS is read."""


def with_operator(
    api: client.HttpApi, plane: cluster.ControlPlane, nodes: int, extra: dict[str, str], keep: bool = False
) -> tuple[float, float, float]:
    """P1 seconds, P3 peak RSS of the install, and peak RSS of an operator restarted onto the installed cluster
    (its informers list every node and every one of its pods at once: the other peak a controller has).
    ``keep``: leave the installed cluster for `steady` (which then saves an install and an uninstall)."""
    label_gpu_nodes(api)
    with operator_process(plane.kubeconfig_path, extra) as proc:
        time.sleep(2)  # informers synced
        began = time.monotonic()
        api.apply(
            {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": SPEC},
            field_manager="helm",
        )
        wait("operator ready", lambda: all_ready(api, nodes), explain=lambda: fleet_says(api))
        took = time.monotonic() - began
        rss = peak_rss_mib(proc.pid)
        print(f"P1 {nodes} nodes: the operator's CPU from its start to every pod Ready: {cpu_seconds(proc.pid):.1f} s")
    with operator_process(plane.kubeconfig_path, extra) as restarted:
        time.sleep(RESTART_SETTLE)
        rss_restart = peak_rss_mib(restarted.pid)
        if not keep:
            delete_cr(api)  # the restarted operator's finalizer cleans up
    if not keep:
        clear(api)
    return took, rss, rss_restart


def steady(api: client.HttpApi, plane: cluster.ControlPlane, nodes: int, seconds: float) -> Counter[str]:
    counting = CountingApi(client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench-operator"))
    s = settings.Settings(identity="bench", leader_election=False, uninstall_timeout=UNDO_WAIT)
    label_gpu_nodes(api)
    op = bootstrap.bootstrap(s, api=counting)  # type: ignore[arg-type]
    op.start()
    try:
        api.apply(
            {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": SPEC},
            field_manager="helm",
        )
        wait("ready", lambda: all_ready(api, nodes))
        time.sleep(RESTART_SETTLE)  # its first reconcile (onto an installed cluster: its initial lists too)
        counting.counting = True
        time.sleep(seconds)
        counting.counting = False
    finally:
        delete_cr(api)
        op.stop()
    clear(api)
    return counting.calls


@attrs.frozen
class Row:
    nodes: int
    floor: float
    operator: float
    rss: float
    rss_restart: float
    calls: Counter[str] | None
    """P2: the in-process operator's requests by verb over ``steady`` seconds (None: not measured here)."""
    steady: float
    seconds: float
    """The row's wall time: adding the nodes, the floor, the operator, the restart and the steady window."""


def measure(sizes: Sequence[int], steady_seconds: float, extra: dict[str, str], steady_each: bool) -> list[Row]:
    """One control plane grown through ``sizes``; P2 at every size with ``steady_each``, else at the largest."""
    sizes = sorted(set(sizes))
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        cluster.ControlPlane(
            nodes=sizes[0],
            node_labels={workloads.GPU_NODE_LABEL: "true"},
            workdir_parent=pathlib.Path(tmp),
            startup_timeout=1800,
        ) as plane,
    ):
        api = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench")
        prepare(api)
        for n in sizes:
            began = time.monotonic()
            if n > len(plane.node_names):
                plane.add_nodes(n - len(plane.node_names), wait=True, timeout=1800)
            base = floor(api, n)
            counted = steady_seconds > 0 and (steady_each or n == sizes[-1])
            took, rss, rss_restart = with_operator(api, plane, n, extra, keep=counted)
            print(
                f"P1 {n} nodes: floor {base:.1f}s, operator {took:.1f}s; "
                f"P3 peak RSS {rss:.1f} MiB (restarted onto it: {rss_restart:.1f} MiB)",
                flush=True,
            )
            counts = steady(api, plane, n, steady_seconds) if counted else None
            rows.append(Row(n, base, took, rss, rss_restart, counts, steady_seconds, time.monotonic() - began))
    return rows


FULL_ROW_MAX = 1000
"""Node counts above it measure P3 alone (`memory_figures`): the 1,000-node floor took 180 s for 7,000 pods on the
2-core reference machine (RESULTS.md, run 3); 5,000 nodes are 35,000 pods and each DaemonSet sync walks every node,
so a whole P1/P2 row takes hours there (docs/benchmarks.md)."""


LARGE_LEASE_SECONDS = 600
"""The kwok nodes' Lease above `FULL_ROW_MAX` nodes: with 40 s, kwok falls behind renewing 5,000 Leases on 2 cores
and nodes flap NotReady (2,447 of 5,000 at once in the first try), so the control plane never has them all Ready."""


def memory_figures(n: int, extra: dict[str, str]) -> list[fig.Figure]:
    """P3 at ``n`` nodes without P1: the operator installs onto ``n`` kwok GPU nodes and its peak RSS is read once
    every pod of its DaemonSets exists and is bound (its informers then hold every node and every pod of ours;
    Ready only changes their status), and again for an operator restarted onto that cluster."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        cluster.ControlPlane(
            nodes=n,
            node_labels={workloads.GPU_NODE_LABEL: "true"},
            workdir_parent=pathlib.Path(tmp),
            startup_timeout=3600,
            node_lease_seconds=LARGE_LEASE_SECONDS,
        ) as plane,
    ):
        started = time.monotonic()
        api = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench")
        prepare(api)
        label_gpu_nodes(api)
        with operator_process(plane.kubeconfig_path, extra) as proc:
            time.sleep(2)
            api.apply(
                {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": SPEC},
                field_manager="helm",
            )
            bound = wait(
                "every pod bound", lambda: all_bound(api, n), timeout=3600, explain=lambda: fleet_says(api), interval=5
            )
            pods = len(api.list("v1", "Pod", namespace=NS).items)
            rss, cpu = peak_rss_mib(proc.pid), cpu_seconds(proc.pid)
        with operator_process(plane.kubeconfig_path, extra) as restarted:
            time.sleep(RESTART_SETTLE)
            rss_restart = peak_rss_mib(restarted.pid)
        took = time.monotonic() - started
    print(
        f"P3 {n} nodes: {pods} pods bound in {bound:.0f}s (operator CPU {cpu:.0f} s); peak RSS {rss:.1f} MiB "
        f"(restarted: {rss_restart:.1f})"
    )
    return [
        fig.Figure(
            id="P3",
            what=f"operator peak RSS (VmHWM), {n:,} nodes, {pods:,} pods created and bound, not awaited Ready "
            f"(P3 alone above {FULL_ROW_MAX:,} nodes; the row took {took:.0f} s)",
            goal=fig.at_most(100.0, "MiB"),
            value=max(rss, rss_restart),
            unit="MiB",
            reference=f"install {rss:.1f} MiB (every pod bound {bound:.0f} s after the CR; the operator's CPU "
            f"meanwhile {cpu:.0f} s), restarted {rss_restart:.1f} MiB",
            nodes=n,
        )
    ]


def to_figures(rows: Sequence[Row]) -> list[fig.Figure]:
    found = []
    for r in rows:
        found += [
            fig.Figure(
                id="P1",
                what=f"CR created → every GPU node's pods Ready, {r.nodes:,} nodes (the row took {r.seconds:.0f} s)",
                goal=fig.ratio_at_most(1.2) if r.nodes >= 1000 else fig.reported("goal at 1,000 and 5,000"),
                value=r.operator,
                unit="s",
                reference=f"the no-operator floor (same DaemonSets applied directly): {r.floor:.1f} s",
                reference_value=r.floor,
                nodes=r.nodes,
            ),
            fig.Figure(
                id="P3",
                what=f"operator peak RSS (VmHWM), {r.nodes:,} nodes, install and restart onto the installed cluster",
                goal=fig.at_most(100.0, "MiB"),
                value=max(r.rss, r.rss_restart),
                unit="MiB",
                reference=f"install {r.rss:.1f} MiB, restarted {r.rss_restart:.1f} MiB",
                nodes=r.nodes,
            ),
        ]
        if r.calls is not None:
            writes = sum(v for k, v in r.calls.items() if k in WRITES)
            verbs = ", ".join(f"{k} {v}" for k, v in sorted(r.calls.items())) or "none"
            found.append(
                fig.Figure(
                    id="P2",
                    what=f"operator writes in {r.steady:.0f} s of steady state, {r.nodes:,} nodes (client side)",
                    goal=fig.at_most(0),
                    value=writes,
                    reference=f"all its requests in the window: {sum(r.calls.values())} ({verbs})",
                    nodes=r.nodes,
                )
            )
    return found


def figures(quick: bool = False, nodes: Sequence[int] = (100, 1000, 5000)) -> list[fig.Figure]:
    """Every size of ``nodes`` up to `FULL_ROW_MAX` with P2 at each (60 s), P3 alone above it; ``quick``: the smallest
    size only, 15 s of steady state."""
    sizes = [min(nodes)] if quick else list(nodes)
    full = [n for n in sizes if n <= FULL_ROW_MAX]
    found = to_figures(measure(full, 15.0 if quick else 60.0, dict(CHART_ENV), steady_each=True)) if full else []
    for n in sizes:
        if n > FULL_ROW_MAX:
            found += memory_figures(n, dict(CHART_ENV))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--steady", type=float, default=300.0)
    parser.add_argument("--steady-each", action="store_true", help="P2 at every node count, not only the largest")
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the operator process (overrides CHART_ENV)"
    )
    args = parser.parse_args()
    extra = dict(CHART_ENV)
    extra.update(dict(item.split("=", 1) for item in args.env))
    rows = measure(args.nodes, args.steady, extra, args.steady_each)
    print("\nP1/P3: ClusterOperator created -> every DaemonSet's pods Ready on every GPU node")
    print(f"operator environment: {' '.join(f'{k}={v}' for k, v in sorted(extra.items())) or '(none)'}")
    print(
        f"{'nodes':>6} {'floor (direct)':>15} {'operator':>10} {'ratio':>6} {'peak RSS':>10} {'restarted':>10}   goal"
    )
    for r in rows:
        goal = "P1 <= 1.2x" + (", P3 <= 100 MiB" if r.nodes >= 1000 else "")
        print(
            f"{r.nodes:>6} {r.floor:>14.1f}s {r.operator:>9.1f}s {r.operator / r.floor:>6.2f} "
            f"{r.rss:>7.1f}MiB {r.rss_restart:>7.1f}MiB   {goal}"
        )
    for r in rows:
        if r.calls is None:
            continue
        total = sum(r.calls.values())
        writes = sum(v for k, v in r.calls.items() if k in WRITES)
        print(f"\nP2: operator requests in {r.steady:.0f} s of steady state ({r.nodes} nodes), client side")
        print(f"{'verb':>12} {'count':>6}")
        for verb, value in sorted(r.calls.items()):
            print(f"{verb:>12} {value:>6}")
        print(f"{'total':>12} {total:>6}   writes: {writes}")
    fig.print_figures(to_figures(rows), "P1, P2, P3")


if __name__ == "__main__":
    threading.stack_size(0)
    main()
