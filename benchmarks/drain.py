"""A driver rollout that drains a fleet that is never idle (issue 41 item 3, R-ROLLOUT; docs/rollout.md "Draining").

Why this module exists: with ``upgradePolicy.drain`` the rollout's wall time is set by how fast GPU workloads
leave their nodes under their PodDisruptionBudgets, and an administrator plans a maintenance window by it. Nothing
is asserted here (tests/integration/operator/test_rollout_drain.py asserts the invariants on a smaller fleet);
the run reports the invariants it saw next to the time.

``python -m benchmarks.drain [--nodes 100] [--max-parallel 10]``: on the loopback control plane, N kwok GPU nodes
(4 GPUs each) run N Deployments of three one-GPU pods, each with a budget allowing one disruption (the real
scheduler, disruption controller and Eviction API; `metax_dev.drainbed`), and one node is cordoned beforehand by
someone else. The operator installs, then a new driver is rolled out with ``drain`` on. Reported: start → the
rollout Idling; the ideal ⌈nodes / maxParallel⌉ × the median time a node is held cordoned (cordon → uncordon); the
most nodes held at once; the fewest ready pods an app had (its budget: 2); evictions the API server refused (429,
from its own ``apiserver_request_total``); driver pods replaced; the node cordoned beforehand still cordoned.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

import attrs
from prometheus_client.parser import text_string_to_metric_families

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from benchmarks import operator_fleet as fleet
from benchmarks import operator_scale
from metax_core.cluster import workloads
from metax_dev import drainbed
from metax_dev.controlplane import build as controlplane_build
from metax_dev.controlplane import cluster
from metax_k8s import client

ID = "R-ROLLOUT"
GPUS, REPLICAS = 4, 3
APPS_NS = "drain-apps"
READY_DELAY = 2.0
"""Seconds kwok takes to make a bound pod Ready."""


def spec(max_parallel: int, log_level: str) -> dict[str, Any]:
    policy = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": "100%", "pause": False}],
        "maxParallel": max_parallel,
        "drain": {"enable": True, "timeoutSeconds": 600},
    }
    driver = {**fleet.SPEC["driver"], "upgradePolicy": policy, "log": {"level": log_level}}
    return {**fleet.SPEC, "driver": driver}


def apply(api: client.HttpApi, body: dict[str, Any]) -> None:
    cr = {"apiVersion": fleet.CR_API, "kind": "ClusterOperator", "metadata": {"name": "cluster-operator"}}
    api.apply({**cr, "spec": body}, field_manager="helm")


def evictions_refused(plane: cluster.ControlPlane) -> int:
    """kube-apiserver's own count of eviction requests it answered 429."""
    kubectl = str(controlplane_build.build(quiet=True).binary("kubectl"))
    text = subprocess.run(
        [kubectl, "--kubeconfig", str(plane.kubeconfig_path), "get", "--raw", "/metrics"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_total")
                and labels.get("subresource") == "eviction"
                and labels.get("code") == "429"
            ):
                total += sample.value
    return int(total)


def driver_pods(api: client.HttpApi) -> dict[str, str]:
    selector = f"{workloads.COMPONENT_LABEL}=driver"
    return {
        p["spec"]["nodeName"]: p["metadata"]["uid"]
        for p in api.list("v1", "Pod", namespace=fleet.NS, label_selector=selector).items
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def rollout_status(api: client.HttpApi) -> dict[str, Any]:
    cr = api.get(fleet.CR_API, "ClusterOperator", "cluster-operator")
    return dict((cr.get("status") or {}).get("upgradeStatus") or {})


@attrs.frozen
class Measured:
    nodes: int
    max_parallel: int
    seconds: float
    held: float
    """The median seconds a node was held cordoned."""
    most_held: int
    fewest_ready: int
    refused: int
    replaced: int
    theirs_cordoned: bool

    @property
    def ideal(self) -> float:
        return math.ceil(self.nodes / self.max_parallel) * self.held


def measure(nodes: int, max_parallel: int) -> Measured:
    plane_options = {"startup_timeout": 1800, "node_lease_seconds": operator_scale.KWOK_LEASE_SECONDS}
    with fleet.gpu_fleet(nodes, pod_ready_seconds=READY_DELAY, **plane_options) as (plane, api):
        names = sorted(n["metadata"]["name"] for n in api.list("v1", "Node").items)
        theirs = names[-1]
        drainbed.give_gpus(api, names, GPUS)
        api.merge_patch("v1", "Node", theirs, {"spec": {"unschedulable": True}}, field_manager="kubectl")
        drainbed.namespace(api, APPS_NS)
        apps = drainbed.apps(api, APPS_NS, nodes, REPLICAS)
        fleet.wait(
            "every app's pods ready",
            lambda: drainbed.ready_pods(api, APPS_NS) == dict.fromkeys(apps, REPLICAS),
            explain=lambda: fleet.fleet_says(api),
        )
        print(f"{len(apps) * REPLICAS} GPU pods ready on {nodes} nodes", flush=True)
        with fleet.operator_process(plane.kubeconfig_path, fleet.CHART_ENV):
            time.sleep(2)
            apply(api, spec(max_parallel, "info"))
            fleet.wait("every pod Ready", lambda: fleet.all_ready(api, nodes), explain=lambda: fleet.fleet_says(api))
            fleet.wait("no rollout", lambda: rollout_status(api).get("phase") == "Idling")
            before = driver_pods(api)
            refused_before = evictions_refused(plane)
            watch = drainbed.Watch(api, names, APPS_NS, apps).start()
            started = time.monotonic()
            apply(api, spec(max_parallel, "debug"))
            fleet.wait("the rollout started", lambda: rollout_status(api).get("upgrading"), timeout=120)
            fleet.wait(
                "the rollout complete",
                lambda: not rollout_status(api).get("upgrading"),
                timeout=600 + 60 * nodes,
                explain=lambda: rollout_status(api).get("message"),
            )
            seconds = time.monotonic() - started
            watch.stop()
            after = driver_pods(api)
            held = [s for spans in watch.held.values() for s in spans]
            theirs_node = api.get("v1", "Node", theirs)
            return Measured(
                nodes=nodes,
                max_parallel=max_parallel,
                seconds=seconds,
                held=statistics.median(held) if held else math.nan,
                most_held=watch.most_marked,
                fewest_ready=min(watch.fewest_ready.values()),
                refused=evictions_refused(plane) - refused_before,
                replaced=sum(1 for n, uid in after.items() if before.get(n) not in (None, uid)),
                theirs_cordoned=bool((theirs_node.get("spec") or {}).get("unschedulable")),
            )


def to_figures(m: Measured) -> list[fig.Figure]:
    what = f"drained driver rollout, {m.nodes} nodes, {m.nodes * REPLICAS} GPU pods, maxParallel {m.max_parallel}: "
    reference = (
        f"ideal: ⌈nodes / maxParallel⌉ × the median time a node is held cordoned ({m.held:.1f} s) = {m.ideal:.1f} s; "
        f"{m.replaced}/{m.nodes} driver pods replaced; most nodes held at once {m.most_held}; fewest ready pods "
        f"of an app {m.fewest_ready} (budget 2); evictions refused by a budget (429) {m.refused}; the node "
        f"cordoned beforehand {'still' if m.theirs_cordoned else 'NOT'} cordoned"
    )
    return [
        fig.Figure(
            ID,
            what + "new driver applied → rollout Idling",
            fig.reported(),
            m.seconds,
            "s",
            reference,
            m.ideal,
            m.nodes,
        )
    ]


def figures(quick: bool = False, nodes: tuple[int, ...] = (100,)) -> list[fig.Figure]:
    count = min(*nodes, 20) if quick else min(nodes)
    return to_figures(measure(count, max(1, count // 10)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--max-parallel", type=int, default=10)
    args = parser.parse_args()
    m = measure(args.nodes, args.max_parallel)
    fig.print_figures(to_figures(m), ID)


if __name__ == "__main__":
    main()
