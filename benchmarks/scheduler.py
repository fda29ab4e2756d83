"""The gpu-scheduler extender's latency and the real kube-scheduler's throughput with and without it (C9).

Run from the repository root: ``python -m benchmarks.scheduler [--rounds 200] [--pods 200] [--no-plane]``.

* Latency: the extender's real HTTP server over loopback, its cache filled with 1,000 and 5,000 nodes of 8 GPUs
  whose topology is published with topo-worker's writer (random free sets), and some bound GPU pods. One
  round is what kube-scheduler does per pod: ``POST /filter`` with every node name (``nodeCacheCapable``),
  then ``POST /prioritize`` with the nodes that passed, on one keep-alive connection. p50/p99 per round
  (goal: p99 ≤ 20 ms at 1,000 nodes), beside a trivial extender measured in the same run: the same HTTP
  server and JSON, answering "all pass, score 0" without looking at any node (the protocol's own cost).
* Throughput: two loopback control planes (kwok nodes with 8 allocatable GPUs each), one whose kube-scheduler
  has the extender (`extender.scheduler_extender`) and one without; ``--pods`` 1-GPU pods created at once,
  timed until all are bound; pods per second side by side (goal: with ≥ 0.8 × without).

Nothing is asserted: the figures depend on the machine. Printed as a table with the goal beside each figure.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import pathlib
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_core.inventory import PciAddress
from metax_core.topology import document, extender
from metax_dev.controlplane import build, network
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client as metax_client
from metax_k8s import objects
from services.gpu_scheduler import cache, server
from services.topo_worker import agent as topo_agent

GPU = extender.GPU


def topology(rng: random.Random) -> document.NodeTopology:
    gpus = []
    for i in range(8):
        numa, switch = i // 4, i // 2
        path = (
            PciAddress(f"0000:{numa * 0x80:02x}:0{1 + switch % 2}.0"),
            PciAddress(f"0000:{numa * 0x80 + 0x40 + switch:02x}:00.0"),
            PciAddress(f"0000:{numa * 0x80 + 0x60 + i:02x}:00.0"),
        )
        group = range(4) if i < 4 else range(4, 8)
        mx = tuple(PciAddress(f"0000:{0x10 + m:02x}:00.0") for m in group if m != i) if rng.random() < 0.5 else ()
        gpus.append(document.Gpu(PciAddress(f"0000:{0x10 + i:02x}:00.0"), numa, path, mx))
    free = tuple(sorted(g.address for g in rng.sample(gpus, rng.randint(0, 8))))
    return document.NodeTopology(gpus=tuple(gpus), free=free)


def filled_cache(nodes: int, rng: random.Random) -> tuple[cache.Cache, list[str]]:
    state = cache.Cache(objects=None)  # type: ignore[arg-type]  # fed directly: no watch threads started
    published: dict[str, dict[str, str | None]] = {}
    names = [f"node-{i:05d}" for i in range(nodes)]
    for name in names:
        key = rng.randrange(64)  # 64 distinct layouts: the scores search runs once per layout, as topo-worker would
        if key not in published:
            published[key] = topo_agent.published(topology(random.Random(key)))  # type: ignore[index]
        state.put_node(
            {
                "metadata": {"name": name, "annotations": published[key]},  # type: ignore[index]
                "status": {"allocatable": {GPU: "8"}},
            }
        )
        if rng.random() < 0.3:
            state.put_pod(pod_on(name, rng.randint(1, 2)))
    for e in state.synced.values():
        e.set()
    return state, names


def pod_on(node: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{uuid.uuid4().hex[:8]}", "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]},
        "status": {"phase": "Running"},
    }


def trivial_server() -> http.server.ThreadingHTTPServer:
    class Trivial(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            args = extender.parse_args(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == extender.FILTER_PATH:
                body = extender.render_filter(extender.Verdict(args.node_names, {}))
            else:
                body = extender.render_priorities([(n, 0) for n in args.node_names])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer((network.LOOPBACK, 0), Trivial)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def rounds(port: int, names: list[str], gpus: int, count: int) -> list[float]:
    pod = {
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]},
    }
    conn = http.client.HTTPConnection(network.LOOPBACK, port)
    took = []
    for _ in range(count):
        began = time.perf_counter()
        conn.request(
            "POST",
            extender.FILTER_PATH,
            json.dumps({"Pod": pod, "NodeNames": names}),
            {"Content-Type": "application/json"},
        )
        passed = extender.parse_filter(conn.getresponse().read()).passed
        conn.request(
            "POST",
            extender.PRIORITIZE_PATH,
            json.dumps({"Pod": pod, "NodeNames": list(passed)}),
            {"Content-Type": "application/json"},
        )
        extender.parse_priorities(conn.getresponse().read())
        took.append((time.perf_counter() - began) * 1000)
    conn.close()
    return took


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def latency(count: int, sizes: Sequence[int] = (1000, 5000)) -> list[fig.Figure]:
    """P11's latency per node count, beside the trivial extender (the protocol's own cost) in the same run."""
    found = []
    trivial = trivial_server()
    for nodes in sizes:
        state, names = filled_cache(nodes, random.Random(nodes))
        served = server.Server(state, host=network.LOOPBACK, port=0).start()
        try:
            rounds(served.port, names, 4, 5)  # warm up
            ours = rounds(served.port, names, 4, count)
            ref = rounds(trivial.server_address[1], names, 4, count)
        finally:
            served.stop()
        found.append(
            fig.Figure(
                id="P11",
                what=f"extender filter+prioritize p99, {nodes:,} nodes (p50 {statistics.median(ours):.1f} ms)",
                goal=fig.at_most(20.0, "ms", "at 1,000 nodes") if nodes == GOAL_NODES else fig.reported(),
                value=p99(ours),
                unit="ms",
                reference=f"trivial extender, same HTTP and JSON, p99: {p99(ref):.1f} ms",
                reference_value=p99(ref),
                nodes=nodes,
            )
        )
    trivial.shutdown()
    return found


GOAL_NODES = 1000


def throughput(pods: int, nodes: int) -> fig.Figure:
    """P11's throughput: pods bound per second with the extender, beside the same plane without it."""
    without = plane_rate(pods, nodes, with_extender=False)
    with_ = plane_rate(pods, nodes, with_extender=True)
    return fig.Figure(
        id="P11",
        what=f"kube-scheduler with the extender, {pods} 1-GPU pods on {nodes} kwok nodes",
        goal=fig.ratio_at_least(0.8),
        value=with_,
        unit="pods/s",
        reference=f"kube-scheduler without the extender: {without:.1f} pods/s",
        reference_value=without,
    )


def figures(quick: bool = False, nodes: Sequence[int] = (100, 1000, 5000)) -> list[fig.Figure]:
    sizes = sorted({*nodes, GOAL_NODES})
    found = latency(20 if quick else 200, sizes)
    return [*found, throughput(50 if quick else 200, 30)]


def wait(check: Callable[[], Any], what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def plane_rate(pods: int, nodes: int, with_extender: bool) -> float:
    """Pods per second bound by a fresh plane's kube-scheduler, with or without the extender wired in."""
    from kubernetes import client

    port = network.free_port()
    wiring = [extender.scheduler_extender(f"http://{network.LOOPBACK}:{port}")] if with_extender else None
    plane = controlplane.ControlPlane(
        nodes=nodes, node_prefix="b", bin_dir=build.build(quiet=True).bin_dir, scheduler_extenders=wiring
    )
    plane.start()
    stop = threading.Event()
    try:
        api = plane.api_client()
        core = client.CoreV1Api(api)
        state = cache.Cache(objects.K8sObjects(metax_client.HttpApi(metax_client.api_client(plane.kubeconfig_path))))
        state.start(stop)
        served = server.Server(state, host=network.LOOPBACK, port=port).start() if with_extender else None
        rng = random.Random(7)
        for name in plane.node_names:
            doc = topology(rng)
            doc = document.NodeTopology(gpus=doc.gpus, free=tuple(g.address for g in doc.gpus))
            core.patch_node(name, {"metadata": {"annotations": topo_agent.published(doc)}})
            core.patch_node_status(name, {"status": {"allocatable": {GPU: "8"}, "capacity": {GPU: "8"}}})
        wait(lambda: len([f for f in state.snapshot()[0].values() if f.topology]) == nodes, "the cache")
        wait(
            lambda: any(s.metadata.name == "default" for s in core.list_namespaced_service_account("default").items),
            "sa",
        )
        began = time.monotonic()
        for i in range(pods):
            core.create_namespaced_pod(
                "default",
                {
                    "metadata": {"name": f"p{i}"},
                    "spec": {
                        "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}],
                        "tolerations": [{"operator": "Exists"}],
                    },
                },
            )
        wait(
            lambda: sum(1 for p in core.list_namespaced_pod("default").items if p.spec.node_name) == pods,
            "all pods bound",
        )
        rate = pods / (time.monotonic() - began)
        if served is not None:
            served.stop()
        return rate
    finally:
        stop.set()
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=30, help="kwok nodes per control plane (8 GPUs each)")
    parser.add_argument("--no-plane", action="store_true", help="latency only (no control planes)")
    args = parser.parse_args(argv)
    found = latency(args.rounds)
    if not args.no_plane:
        found.append(throughput(args.pods, args.nodes))
    fig.print_figures(found, "P11")
    return 0


if __name__ == "__main__":
    sys.exit(main())
