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
  all pods Ready; then the operator (a subprocess, started as the chart starts it: `services.operator` with
  the Deployment's environment, see `operator_fleet.CHART_ENV`) gets the ClusterOperator and the same wait
  runs. Both on the same control plane, one after the other. The reference gives the CPU seconds each
  control-plane process (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok) spent in each
  install, and the operator's: on 2 saturated cores they say where a gap between the two comes from.
- P2: the operator runs in-process with a counting `Api` wrapper for ``--steady`` seconds, at the largest node
  count (``--steady 0`` skips it; ``--steady-each``: at every count): started onto the cluster the P1 operator
  installed (the CR applied again unchanged), counted after ``operator_fleet.RESTART_SETTLE`` seconds;
  requests and writes are counted per verb on the client side (the API server's metrics carry no user agent).
- P3: the operator subprocess's VmHWM (peak RSS) from /proc after P1, its whole life included (informers'
  initial lists, the install, the reconciles that follow); and the same for an operator restarted onto the
  installed cluster (its informers list every node and all its pods at once), once it has gone quiet
  (`operator_fleet.settled`). Above `FULL_ROW_MAX` nodes (``python -m benchmarks --full-rows-to N`` moves it) the
  floor is left out (`fleet_figures`): the operator's install to every pod Ready gives P1's CPU share and P3.

The harness (the fleet, the CR, the operator process, /proc readings) is `benchmarks.operator_fleet`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from benchmarks import operator_fleet as fleet
from metax_core.cluster import workloads
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_k8s import client
from services.operator import bootstrap, settings

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


READY_TIMEOUT = 3600.0
"""Seconds the floor and the operator each get for every pod Ready: a budget for 5,000 nodes (35,000 pods) on 2
cores, where the 1,000-node floor took 162–180 s."""


def plane_cpu(plane: cluster.ControlPlane) -> dict[str, float]:
    """CPU seconds each control-plane process (kube-apiserver, etcd, kwok, …) has used so far."""
    return {name: fleet.cpu_seconds(pid) for name, pid in plane.pids().items()}


def spent_since(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


@attrs.frozen
class Phase:
    """One install to every pod Ready: its seconds and the CPU seconds each process spent meanwhile."""

    seconds: float
    cpu: Mapping[str, float]
    """Control-plane process name → CPU seconds during the phase; the operator's (its whole life up to Ready, its
    informers' initial lists included) as ``operator``."""


def floor(api: client.HttpApi, plane: cluster.ControlPlane, nodes: int) -> Phase:
    fleet.label_gpu_nodes(api)  # the previous row's operator removed the product's labels when its CR was deleted
    rendered = workloads.render(validation.parse(fleet.SPEC))
    cpu_before, began = plane_cpu(plane), time.monotonic()
    for obj in rendered.objects:
        api.apply(obj, field_manager="bench-floor", force=True)
    fleet.wait(
        "floor ready", lambda: fleet.all_ready(api, nodes), timeout=READY_TIMEOUT, explain=lambda: fleet.fleet_says(api)
    )
    took = Phase(time.monotonic() - began, spent_since(cpu_before, plane_cpu(plane)))
    fleet.clear(api)
    return took


def with_operator(
    api: client.HttpApi, plane: cluster.ControlPlane, nodes: int, extra: dict[str, str], keep: bool = False
) -> tuple[Phase, float, float]:
    """P1's install, P3 peak RSS of the install, and peak RSS of an operator restarted onto the installed cluster
    (its informers list every node and every one of its pods at once: the other peak a controller has).
    ``keep``: leave the installed cluster for `steady` (which then saves an install and an uninstall)."""
    fleet.label_gpu_nodes(api)
    with fleet.operator_process(plane.kubeconfig_path, extra) as proc:
        time.sleep(2)  # informers synced
        cpu_before, began = plane_cpu(plane), time.monotonic()
        fleet.apply_cr(api)
        fleet.wait(
            "operator ready",
            lambda: fleet.all_ready(api, nodes),
            timeout=READY_TIMEOUT,
            explain=lambda: fleet.fleet_says(api),
        )
        took = Phase(
            time.monotonic() - began,
            {**spent_since(cpu_before, plane_cpu(plane)), "operator": fleet.cpu_seconds(proc.pid)},
        )
        rss = fleet.peak_rss_mib(proc.pid)
        print(f"P1 {nodes} nodes: CPU seconds to every pod Ready: {cpu_table(took.cpu)}", flush=True)
    with fleet.operator_process(plane.kubeconfig_path, extra) as restarted:
        fleet.settled(restarted.pid)
        rss_restart = fleet.peak_rss_mib(restarted.pid)
        if not keep:
            fleet.delete_cr(api)  # the restarted operator's finalizer cleans up
    if not keep:
        fleet.clear(api)
    return took, rss, rss_restart


def cpu_table(cpu: Mapping[str, float]) -> str:
    """``kube-apiserver 812 s, etcd 140 s, …``, largest first."""
    return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]))


def cpu_compared(floor: Mapping[str, float], operator: Mapping[str, float]) -> str:
    """The CPU seconds of each process in the floor's install → in the operator's, and the totals."""
    names = sorted(set(floor) | set(operator), key=lambda n: -operator.get(n, 0.0))
    each = ", ".join(f"{n} {floor.get(n, 0.0):.0f} → {operator.get(n, 0.0):.0f}" for n in names)
    share = f"; the operator's {operator_share(operator):.1%} of the control plane's" if plane_seconds(operator) else ""
    return (
        f"CPU seconds, floor → operator: total {sum(floor.values()):.0f} → {sum(operator.values()):.0f} ({each}){share}"
    )


def steady(api: client.HttpApi, plane: cluster.ControlPlane, nodes: int, seconds: float) -> Counter[str]:
    counting = CountingApi(client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench-operator"))
    s = settings.Settings(identity="bench", leader_election=False, uninstall_timeout=fleet.UNDO_WAIT)
    fleet.label_gpu_nodes(api)
    op = bootstrap.bootstrap(s, api=counting)  # type: ignore[arg-type]
    op.start()
    try:
        fleet.apply_cr(api)
        fleet.wait("ready", lambda: fleet.all_ready(api, nodes))
        time.sleep(fleet.RESTART_SETTLE)  # its first reconcile (onto an installed cluster: its initial lists too)
        counting.counting = True
        time.sleep(seconds)
        counting.counting = False
    finally:
        fleet.delete_cr(api)
        op.stop()
    fleet.clear(api)
    return counting.calls


@attrs.frozen
class Row:
    nodes: int
    floor: Phase
    operator: Phase
    rss: float
    rss_restart: float
    calls: Counter[str] | None
    """P2: the in-process operator's requests by verb over ``steady`` seconds (None: not measured here)."""
    steady: float
    seconds: float
    """The row's wall time: adding the nodes, the floor, the operator, the restart and the steady window."""


KWOK_LEASE_SECONDS = 600
"""The kwok nodes' Lease, at every node count. With kubelet's 40 s, kwok falls behind renewing its Leases on 2 cores
while thousands of pods start: at 5,000 nodes 2,447 of 5,000 flapped NotReady at once; at 1,000 nodes, on a quiet
machine, enough of them for 986 pods of the floor's 7,000 to be marked not Ready by the node lifecycle controller,
which kwok never marks Ready again, so the floor never finished. Node heartbeats are not what P1 measures."""


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
            node_lease_seconds=KWOK_LEASE_SECONDS,
        ) as plane,
    ):
        api = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench")
        fleet.prepare(api)
        for n in sizes:
            began = time.monotonic()
            if n > len(plane.node_names):
                plane.add_nodes(n - len(plane.node_names), wait=True, timeout=1800)
            base = floor(api, plane, n)
            counted = steady_seconds > 0 and (steady_each or n == sizes[-1])
            took, rss, rss_restart = with_operator(api, plane, n, extra, keep=counted)
            print(
                f"P1 {n} nodes: floor {base.seconds:.1f}s, operator {took.seconds:.1f}s; "
                f"P3 peak RSS {rss:.1f} MiB (restarted onto it: {rss_restart:.1f} MiB)",
                flush=True,
            )
            counts = steady(api, plane, n, steady_seconds) if counted else None
            rows.append(Row(n, base, took, rss, rss_restart, counts, steady_seconds, time.monotonic() - began))
    return rows


FULL_ROW_MAX = 1000
"""Node counts above it measure P1's CPU share and P3 without the floor (`fleet_figures`). The 1,000-node floor
took 162–180 s for 7,000 pods on the 2-core reference machine (RESULTS.md, run 4 and its notes); 5,000 nodes are
35,000 pods and each DaemonSet sync walks every node, so a whole P1/P2 row took 87–106 min there (RESULTS.md runs
11 and 12, ``--full-rows-to 5000``)."""


def fleet_figures(n: int, extra: dict[str, str]) -> list[fig.Figure]:
    """P1's CPU share and P3 at ``n`` nodes without the floor: the operator installs onto ``n`` kwok GPU nodes until
    every pod is Ready, its CPU against the control plane's and its peak RSS are read, and the peak RSS of an
    operator restarted onto that cluster once it has gone quiet (`operator_fleet.settled`)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        cluster.ControlPlane(
            nodes=n,
            node_labels={workloads.GPU_NODE_LABEL: "true"},
            workdir_parent=pathlib.Path(tmp),
            startup_timeout=3600,
            node_lease_seconds=KWOK_LEASE_SECONDS,
        ) as plane,
    ):
        started = time.monotonic()
        api = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="bench")
        fleet.prepare(api)
        fleet.label_gpu_nodes(api)
        with fleet.operator_process(plane.kubeconfig_path, extra) as proc:
            time.sleep(2)
            plane_before = plane_cpu(plane)
            fleet.apply_cr(api)
            bound = fleet.wait(
                "every pod bound", lambda: fleet.all_bound(api, n), timeout=3600, explain=lambda: fleet.fleet_says(api)
            )
            ready = bound + fleet.wait(
                "every pod Ready", lambda: fleet.all_ready(api, n), timeout=3600, explain=lambda: fleet.fleet_says(api)
            )
            install = {**spent_since(plane_before, plane_cpu(plane)), "operator": fleet.cpu_seconds(proc.pid)}
            pods = len(api.list("v1", "Pod", namespace=fleet.NS).items)
            rss = fleet.peak_rss_mib(proc.pid)
        with fleet.operator_process(plane.kubeconfig_path, extra) as restarted:
            quiet = fleet.settled(restarted.pid)
            rss_restart = fleet.peak_rss_mib(restarted.pid)
        took = time.monotonic() - started
    print(
        f"P1/P3 {n} nodes: {pods} pods bound in {bound:.0f} s, Ready in {ready:.0f} s; {cpu_table(install)}; "
        f"peak RSS {rss:.1f} MiB (restarted: {rss_restart:.1f}, quiet after {quiet:.0f} s)",
        flush=True,
    )
    row = f"without the floor at this node count; the row took {took:.0f} s"
    return [
        fig.Figure(
            id="P1",
            what=f"operator CPU in the install, share of the control plane's, {n:,} nodes ({row})",
            goal=fig.at_most(CPU_SHARE_GOAL, "%") if n >= FLEET else fig.reported("goal at 5,000"),
            value=round(100.0 * operator_share(install), 2),
            unit="%",
            reference=f"the operator's {install['operator']:.0f} s (its whole life up to every pod Ready, "
            f"{ready:.0f} s after the CR), the control plane's {plane_seconds(install):.0f} s in the same install",
            nodes=n,
        ),
        fig.Figure(
            id="P3",
            what=f"operator peak RSS (VmHWM), {n:,} nodes, {pods:,} pods, install and restart onto the installed "
            f"cluster ({row})",
            goal=fig.at_most(RSS_GOAL_FLEET if n >= FLEET else RSS_GOAL, "MiB"),
            value=max(rss, rss_restart),
            unit="MiB",
            reference=f"install {rss:.1f} MiB (every pod Ready {ready:.0f} s after the CR), "
            f"restarted {rss_restart:.1f} MiB (quiet after {quiet:.0f} s)",
            nodes=n,
        ),
    ]


FLEET = 5000
"""The node count of issue 43's operator goals (item 7): CPU share in P1 and peak RSS."""
CPU_SHARE_GOAL = 2.0
"""Percent: the operator's CPU in an install at `FLEET` nodes against the control plane's (3.2 % before issue 43)."""
RSS_GOAL = 100.0
RSS_GOAL_FLEET = 64.0
"""MiB: peak RSS at `FLEET` nodes (94.2 before issue 43); `RSS_GOAL` below it (issues 11 and 26)."""


def plane_seconds(cpu: Mapping[str, float]) -> float:
    """The control plane's CPU seconds in a `Phase` (every process but the operator)."""
    return sum(v for n, v in cpu.items() if n != "operator")


def operator_share(cpu: Mapping[str, float]) -> float:
    """The operator's CPU seconds in a `Phase` as a fraction of the control plane's (0 when nothing was spent)."""
    plane = plane_seconds(cpu)
    return cpu.get("operator", 0.0) / plane if plane else 0.0


def to_figures(rows: Sequence[Row]) -> list[fig.Figure]:
    found = []
    for r in rows:
        found += [
            fig.Figure(
                id="P1",
                what=f"CR created → every GPU node's pods Ready, {r.nodes:,} nodes (the row took {r.seconds:.0f} s)",
                goal=fig.ratio_at_most(1.2) if r.nodes >= 1000 else fig.reported("goal at 1,000 and 5,000"),
                value=r.operator.seconds,
                unit="s",
                reference=f"the no-operator floor (same DaemonSets applied directly): {r.floor.seconds:.1f} s; "
                + cpu_compared(r.floor.cpu, r.operator.cpu),
                reference_value=r.floor.seconds,
                nodes=r.nodes,
            ),
            fig.Figure(
                id="P1",
                what=f"operator CPU in the install, share of the control plane's, {r.nodes:,} nodes",
                goal=fig.at_most(CPU_SHARE_GOAL, "%") if r.nodes >= FLEET else fig.reported("goal at 5,000"),
                value=round(100.0 * operator_share(r.operator.cpu), 2),
                unit="%",
                reference=f"the operator's {r.operator.cpu.get('operator', 0.0):.0f} s (its whole life up to every pod "
                f"Ready), the control plane's {plane_seconds(r.operator.cpu):.0f} s in the same install",
                nodes=r.nodes,
            ),
            fig.Figure(
                id="P3",
                what=f"operator peak RSS (VmHWM), {r.nodes:,} nodes, install and restart onto the installed cluster",
                goal=fig.at_most(RSS_GOAL_FLEET if r.nodes >= FLEET else RSS_GOAL, "MiB"),
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


def figures(
    quick: bool = False, nodes: Sequence[int] = (100, 1000, 5000), full_rows_to: int = FULL_ROW_MAX
) -> list[fig.Figure]:
    """Every size of ``nodes`` up to ``full_rows_to`` with P2 at each (60 s), P3 alone above it; ``quick``: the
    smallest size only, 15 s of steady state."""
    sizes = [min(nodes)] if quick else list(nodes)
    full = [n for n in sizes if n <= full_rows_to]
    found = to_figures(measure(full, 15.0 if quick else 60.0, dict(fleet.CHART_ENV), steady_each=True)) if full else []
    for n in sizes:
        if n > full_rows_to:
            found += fleet_figures(n, dict(fleet.CHART_ENV))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--steady", type=float, default=300.0)
    parser.add_argument("--steady-each", action="store_true", help="P2 at every node count, not only the largest")
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the operator process (overrides the chart's)"
    )
    args = parser.parse_args()
    extra = dict(fleet.CHART_ENV)
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
            f"{r.nodes:>6} {r.floor.seconds:>14.1f}s {r.operator.seconds:>9.1f}s "
            f"{r.operator.seconds / r.floor.seconds:>6.2f} "
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
