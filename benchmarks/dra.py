"""The DRA driver (R-DRA): NodePrepareResources latency over the real protocol, ResourceSlice writes in steady
state, and pod created → Running on a real node through DRA next to the device plugin, each with its reference
measured in the same run.

Run from the repository root: ``python -m benchmarks.dra [--calls 500] [--rounds 720] [--pods 5] [--no-real-node]``.

* **NodePrepareResources** (then NodeUnprepareResources) for a 2-GPU claim, over the driver's unix socket with a
  grpc client as the kubelet: the real agent (fake 8-GPU host, in-memory cluster for the ResourceClaims) behind
  the real `metax_k8s.dra.server`. Reference: a bare grpcio server on a unix socket answering the same request
  with an empty response (the protocol's floor on this machine).
* **ResourceSlice writes per hour in steady state** (goal 0): the agent's rounds at the default 5 s interval for
  an hour of its clock (``--rounds``), writes counted at the cluster port. Reference: a publisher that applies
  its slices every round (what a driver without `plan_slices`' comparison writes).
* **pod created → Running** on real nodes (kubelet + containerd, cached binaries): one node served by gpu-device,
  one by dra-driver, both as host processes on fake hosts; ``--pods`` pods with 2 GPUs each, one at a time.
  Whole-second timestamps are avoided: the time is polled from the API every 50 ms.

Nothing is asserted; numbers depend on the machine. Printed as a table.
"""

from __future__ import annotations

import os

# mx-smi runs as a child process while gRPC threads serve (as in services.dra_driver.__main__): set before grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import concurrent.futures
import logging
import math
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc

from benchmarks import figures as fig
from metax_core.dra import DRIVER, slices
from metax_hw_fake import builder
from metax_k8s.dra import server
from metax_k8s.dra.v1 import api_pb2 as v1
from metax_k8s.dra.v1 import api_pb2_grpc as v1_grpc
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.dra_driver import agent, bootstrap, config

NODE = "bench-node"


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99, ordered[-1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingObjects:
    """The cluster port with its writes counted (applies and deletes)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes = 0

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return self.inner.apply(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return self.inner.delete(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def driver_on_fake_host(gpus: int = 8) -> Iterator[tuple[agent.DraDriver, inmemory.InMemoryCluster, Clock, Any]]:
    base = pathlib.Path(tempfile.mkdtemp(prefix="drab", dir="/tmp"))
    try:
        fake = builder.FakeHostBuilder().gpus(gpus).host_driver("2.20.0").build(base / "h")
        k8s = inmemory.InMemoryCluster()
        k8s.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="b")
        ports = cluster.in_memory(k8s, "dra-driver", NODE)
        counting = CountingObjects(ports.objects)
        ports = cluster.ClusterPorts(objects=counting, nodes=ports.nodes, events=ports.events)
        settings = config.Settings(
            node_name=NODE,
            host_root=fake.root,
            required_components=(),
            kubelet_dir=base / "k",  # type: ignore[arg-type]
        )
        clock = Clock()
        built = bootstrap.bootstrap(settings, hw=agent.Hardware.of(fake.hw), ports=ports, clock=clock)
        built.tick()
        try:
            yield built, k8s, clock, counting
        finally:
            built.shutdown()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def make_claim(k8s: inmemory.InMemoryCluster, name: str, devices: list[str]) -> Any:
    created = k8s.objects.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
        },
        field_manager="b",
    )
    results = [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    k8s.objects.apply_status(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "status": {"allocation": {"devices": {"results": results}}},
        },
        field_manager="b",
    )
    return v1.Claim(namespace="default", uid=created["metadata"]["uid"], name=name)


def timed(call: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


class Echo(v1_grpc.DRAPluginServicer):  # type: ignore[misc]
    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return v1.NodePrepareResourcesResponse()

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return v1.NodeUnprepareResourcesResponse()


def prepare_latencies(calls: int) -> list[tuple[str, list[float]]]:
    with driver_on_fake_host() as (built, k8s, _, _):
        names = sorted(slices.published_in(k8s.objects.list(slices.API_VERSION, slices.KIND).items, NODE))
        claim = make_claim(k8s, "bench", names[:2])
        request = v1.NodePrepareResourcesRequest(claims=[claim])
        unrequest = v1.NodeUnprepareResourcesRequest(claims=[claim])
        with grpc.insecure_channel(f"unix://{built.settings.plugin_dir / server.DRA_SOCKET}") as channel:
            stub = v1_grpc.DRAPluginStub(channel)
            answer = stub.NodePrepareResources(request, timeout=5)
            assert not answer.claims[claim.uid].error, answer.claims[claim.uid].error
            stub.NodeUnprepareResources(unrequest, timeout=5)
            prepare: list[float] = []
            repeat: list[float] = []
            unprepare: list[float] = []
            for _ in range(calls):
                prepare += timed(lambda: stub.NodePrepareResources(request, timeout=5), 1)
                repeat += timed(lambda: stub.NodePrepareResources(request, timeout=5), 1)  # the kubelet's retry
                unprepare += timed(lambda: stub.NodeUnprepareResources(unrequest, timeout=5), 1)
            rows = [
                ("NodePrepareResources, 2 GPUs (CDI spec + checkpoint written)", prepare),
                ("NodePrepareResources repeated (answered from the checkpoint)", repeat),
                ("NodeUnprepareResources (spec + checkpoint entry removed)", unprepare),
            ]
    directory = pathlib.Path(tempfile.mkdtemp(prefix="drae", dir="/tmp"))
    echo = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    v1_grpc.add_DRAPluginServicer_to_server(Echo(), echo)
    echo.add_insecure_port(f"unix://{directory / 'echo.sock'}")
    echo.start()
    try:
        with grpc.insecure_channel(f"unix://{directory / 'echo.sock'}") as channel:
            stub = v1_grpc.DRAPluginStub(channel)
            stub.NodePrepareResources(request, timeout=5)
            rows.append(
                (
                    "reference: bare grpcio echo, same request",
                    timed(lambda: stub.NodePrepareResources(request, timeout=5), calls),
                )
            )
    finally:
        echo.stop(0).wait()
        shutil.rmtree(directory, ignore_errors=True)
    return rows


def steady_writes(rounds: int) -> tuple[int, int, float]:
    """(writes of the driver, writes of an every-round publisher, hours of the agent's clock)."""
    with driver_on_fake_host() as (built, k8s, clock, counting):
        interval = built.settings.healthy_interval
        before = counting.writes
        naive = 0
        for _ in range(rounds):
            clock.now += interval
            built.tick()
            naive += len(k8s.objects.list(slices.API_VERSION, slices.KIND).items)  # one apply per slice per round
        return counting.writes - before, naive, rounds * interval / 3600


def real_node_times(pods: int) -> list[tuple[str, list[float]]]:
    """Two real nodes, one per allocator; ``pods`` 2-GPU pods on each, one at a time, created → Running."""
    from kubernetes import client

    from metax_core.cluster import dra_objects
    from metax_core.node import readiness
    from metax_dev.controlplane import cluster as controlplane
    from metax_dev.realnode import devnodes, launcher
    from metax_hw import hostfiles
    from tests.realnode import gpus as gpu_helpers
    from tests.realnode import pods as pod_helpers
    from tests.support.real_node import AGENT_ENV

    work = pathlib.Path(tempfile.mkdtemp(prefix="drabench-"))
    found: dict[str, list[float]] = {"device plugin": [], "DRA": []}
    processes = []
    with controlplane.ControlPlane(nodes=0, verbosity=0) as plane:
        nodes = launcher.RealNodes(plane, 0, prefix="drabench")
        api = plane.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        try:
            nodes.start()
            started = {}
            for kind, module in (("device plugin", "services.gpu_device"), ("DRA", "services.dra_driver")):
                fake = (
                    builder.FakeHostBuilder()
                    .gpus(4, numa_nodes=2, switches=0)
                    .host_driver("2.18.0")
                    .build(work / kind.replace(" ", "-"))
                )
                devnodes.make_device_nodes_real(fake.root)
                real = nodes.add_node(device_root=fake.root)
                board = hostfiles.FileReadinessBoard(fake.root)
                for component in config.from_env({"NODE_NAME": real.name}).required_components:
                    board.publish(readiness.ComponentReadiness(component, True, "benchmark: ready"))
                env = {
                    **AGENT_ENV,
                    "NODE_NAME": real.name,
                    "METAX_HOST_ROOT": str(fake.root),
                    "METAX_KUBELET_DIR": str(real.kubelet_layout.root_dir),
                    "METAX_POD_RESOURCES_SOCKET": str(real.pod_resources_socket),
                    "KUBECONFIG": str(plane.kubeconfig_path),
                    "PATH": fake.env()["PATH"],
                    "PYTHONPATH": str(ROOT),
                    "HOME": os.environ.get("HOME", "/root"),
                }
                processes.append(real.spawn(module.rsplit(".", 1)[1], [sys.executable, "-m", module], env))
                started[kind] = real.name
            for body in dra_objects.device_classes():
                custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", body)
            core.create_namespace({"metadata": {"name": "bench"}})
            pod_helpers.wait(
                lambda: gpu_helpers.allocatable(core, started["device plugin"]) == 4, "gpu-device", timeout=120
            )
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "two"},
                "spec": {
                    "spec": {
                        "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}
                    }
                },
            }
            custom.create_namespaced_custom_object("resource.k8s.io", "v1", "bench", "resourceclaimtemplates", template)
            for i in range(pods):
                for kind, node_name in started.items():
                    pod = pod_helpers.busybox_pod(f"p{i}-{kind[:3].lower()}", node_name, "sleep 3600")
                    del pod["spec"]["nodeName"]
                    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
                    if kind == "DRA":
                        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
                        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
                    else:
                        pod["spec"]["containers"][0]["resources"] = {"limits": {gpu_helpers.GPU: "2"}}
                    name = pod["metadata"]["name"]
                    began = time.monotonic()
                    core.create_namespaced_pod("bench", pod)
                    pod_helpers.wait(
                        lambda n=name: pod_helpers.phase(core, "bench", n) == "Running",
                        name,
                        timeout=120,
                        interval=0.05,
                    )
                    found[kind].append((time.monotonic() - began) * 1000)
                    core.delete_namespaced_pod(name, "bench", grace_period_seconds=0)
                    pod_helpers.wait(lambda n=name: not _pod_exists(core, n), f"{name} gone", timeout=120)
        finally:
            for process in processes:
                process.stop()
            nodes.stop()
            api.close()
            shutil.rmtree(work, ignore_errors=True)
    return [
        ("pod created -> Running, 2 GPUs, device plugin (reference)", found["device plugin"]),
        ("pod created -> Running, 2 GPUs, DRA claim from a template", found["DRA"]),
    ]


def _pod_exists(core: Any, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespaced_pod(name, "bench")
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def measure(calls: int, rounds: int, pods: int, real_node: bool) -> tuple[list[Any], tuple[int, int, float]]:
    """The module's rows (name, p50, p99, max, n) and (driver writes, every-round writes, hours), one run."""
    rows = [(name, *percentiles(s), len(s)) for name, s in prepare_latencies(calls)]
    if real_node:
        try:
            rows += [(name, *percentiles(s), len(s)) for name, s in real_node_times(pods)]
        except (Exception, SystemExit) as exc:  # the other figures stand; this one becomes an error row
            rows.append((f"real node failed: {type(exc).__name__}: {exc}", math.nan, math.nan, math.nan, 0))
    return rows, steady_writes(rounds)


def to_figures(rows: list[Any], writes: tuple[int, int, float]) -> list[fig.Figure]:
    """P12: NodePrepareResources p50 and p99 beside the echo, Running via DRA beside the device plugin, writes."""
    by_name = {r[0]: r for r in rows}
    prepare, echo = rows[0], by_name["reference: bare grpcio echo, same request"]
    found = [
        fig.Figure(
            id="P12",
            what=f"NodePrepareResources, 2 GPUs, {label} ({prepare[4]} calls)",
            goal=fig.reported(),
            value=prepare[index],
            unit="ms",
            reference=f"bare grpcio echo, same request, {label}: {echo[index]:.3f} ms",
            reference_value=echo[index],
        )
        for label, index in (("p50", 1), ("p99", 2))
    ]
    plugin = [r for r in rows if "device plugin (reference)" in r[0]]
    dra = [r for r in rows if "DRA claim" in r[0]]
    failed = [r[0] for r in rows if r[0].startswith("real node failed")]
    if failed:
        found.append(fig.Figure(id="P12", what="pod created → Running via DRA", goal=fig.reported(), error=failed[0]))
    if plugin and dra:
        found.append(
            fig.Figure(
                id="P12",
                what=f"pod created → Running, 2 GPUs, DRA claim from a template, p50 of {dra[0][4]} (real node)",
                goal=fig.reported(),
                value=dra[0][1],
                unit="ms",
                reference=f"the same pod through the device plugin, p50: {plugin[0][1]:.0f} ms",
                reference_value=plugin[0][1],
            )
        )
    ours, naive, hours = writes
    found.append(
        fig.Figure(
            id="P12",
            what=f"ResourceSlice writes per hour in steady state ({hours:.1f} h of rounds)",
            goal=fig.at_most(0, "/h"),
            value=ours / hours,
            unit="/h",
            reference=f"a publisher applying its slices every round: {naive / hours:.0f}/h",
        )
    )
    return found


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    logging.basicConfig(level=logging.ERROR)
    if quick:
        return to_figures(*measure(50, 72, 1, real_node=False))
    return to_figures(*measure(500, 720, 5, real_node=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=720)
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--no-real-node", action="store_true")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    rows, writes = measure(options.calls, options.rounds, options.pods, not options.no_real_node)
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'p50 ms':>9}  {'p99 ms':>9}  {'max ms':>9}  {'n':>5}")
    for name, p50, p99, worst, n in rows:
        print(f"{name:<{width}}  {p50:>9.3f}  {p99:>9.3f}  {worst:>9.3f}  {n:>5}")
    ours, naive, hours = writes
    print()
    print(
        f"ResourceSlice writes in steady state over {hours:.1f} h of rounds: dra-driver {ours / hours:.0f}/h (goal 0);"
    )
    print(f"  reference, a publisher applying its slices every round: {naive / hours:.0f}/h")
    fig.print_figures(to_figures(rows, writes), "P12")
    return 0


if __name__ == "__main__":
    sys.exit(main())
