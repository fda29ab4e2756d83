"""gpu-device latency over the real protocol: Allocate and GetPreferredAllocation round trips on the unix
socket, and the delay from a GPU turning unhealthy (or recovering) to the test kubelet seeing it.

Run from the repository root: ``python -m benchmarks.device_plugin [--calls 2000] [--flips 20]``. It builds a
temporary host root with 8 fake GPUs (two NUMA nodes, two PCIe switches each), starts the test kubelet and
the real agent, and prints a table. Nothing is asserted: numbers depend on the machine.

P5 is measured three times: quiet, Allocate and then the bare grpcio echo once the agent has stopped (against
the 1 ms goal); then Allocate and the echo alternating call by call in the same process, with no load and
under a fixed CPU load (`cpu_load`: one ``while True: pass`` interpreter per core, started for that
measurement and killed after), so both columns see the same load: those rows give Allocate's p99 as a
multiple of the echo's (the 1.2× goal).

The health delay (R-HEALTH) is a fault's first reading (at most ``healthy_interval`` away, checks run when due at a
tick) plus the confirming reading (``Rules.recheck``, 0.5 s, or the interval when shorter): the goal is ≤ interval +
1 s for a fault and ≤ 2 intervals for a recovery; the push itself (ListAndWatch) is the part below a millisecond
or so. Production uses the chart's healthyInterval (default 5 s) and a 0.5 s tick. The false-withdrawal row runs
the agent's health reading (`services._agent.health.HealthWatch`) over 10,000 readings of healthy GPUs whose tool
times out 1 % of the time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import logging
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_core.errors import HardwareError
from metax_core.inventory import GpuHealth, PciAddress, PciFunction
from metax_core.node import (
    devices,
    readiness,
)
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_k8s.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from services._agent import health as health_watch
from services.gpu_device import bootstrap, config
from tests.deviceplugin.fakes import FakeInventory, FakeMonitor, FakeNodeMetadata, gpu

GPU = devices.Resource.GPU.value
SGPU = devices.Resource.SGPU.value


def eight_gpus() -> list:  # type: ignore[type-arg]
    return [gpu(0x10 + i, numa=i // 4, path=(0x01 + i // 4, 0x40 + i // 2)) for i in range(8)]


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99, ordered[-1]


class Bench:
    def __init__(self, healthy_interval: float, tick: float, monitor: type[FakeMonitor] = FakeMonitor) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="dpb", dir="/tmp"))
        self.inventory = FakeInventory(eight_gpus())
        self.monitor = monitor(self.inventory)
        self.labels = FakeNodeMetadata("bench")
        board = hostfiles.FileReadinessBoard(self.root)
        for component in config.default_required():
            board.publish(readiness.ComponentReadiness(component, True))
        self.kubelet = Kubelet(self.root / "var/lib/kubelet/device-plugins").start()
        settings = config.Settings(
            node_name="bench",
            host_root=self.root,
            healthy_interval=healthy_interval,
            tick=tick,
            label_interval=0.05,
            readiness_interval=1.0,
            inventory_interval=10.0,
        )
        self.agent = bootstrap.bootstrap(
            settings, inventory=self.inventory, monitor=self.monitor, nodes=self.labels, board=board
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.agent.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self.kubelet.wait_for(lambda: len(self.kubelet.healthy(GPU)) == 8, timeout=30)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        self.kubelet.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def timed(call: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def rpc_latencies(calls: int) -> list[tuple[str, list[float]]]:
    bench = Bench(healthy_interval=5.0, tick=0.5)
    try:
        ids = sorted(bench.kubelet.healthy(GPU))
        rows = [
            ("Allocate, 1 GPU", timed(lambda: bench.kubelet.allocate(GPU, ids[:1]), calls)),
            ("Allocate, 8 GPUs", timed(lambda: bench.kubelet.allocate(GPU, ids), calls)),
            ("GetPreferredAllocation, 4 of 8 GPUs", timed(lambda: bench.kubelet.preferred(GPU, ids, [], 4), calls)),
        ]
        bench.labels.patch_node_metadata("bench", labels={devices.MODE_LABEL: "sgpu"})
        bench.kubelet.wait_for(lambda: len(bench.kubelet.healthy(SGPU)) == 128, timeout=30)
        shares = sorted(bench.kubelet.healthy(SGPU))
        rows.append(
            (
                "GetPreferredAllocation, 4 of 128 sGPUs",
                timed(lambda: bench.kubelet.preferred(SGPU, shares, [], 4), max(calls // 10, 20)),
            )
        )
        return rows
    finally:
        bench.close()


class TimedMonitor(FakeMonitor):
    """Remembers when each health check ran, to split the delay into waiting for a check and pushing."""

    def __init__(self, inventory: FakeInventory) -> None:
        super().__init__(inventory)
        self.checked: list[float] = []

    def health(self):  # type: ignore[no-untyped-def]
        self.checked.append(time.monotonic())
        return super().health()


def health_delays(flips: int, healthy_interval: float, tick: float) -> dict[str, list[float]]:
    """Flip one GPU sick and back ``flips`` times, each at a random phase of the check cycle."""
    bench = Bench(healthy_interval=healthy_interval, tick=tick, monitor=TimedMonitor)
    monitor = bench.monitor
    assert isinstance(monitor, TimedMonitor)
    rng = random.Random(7)
    found: dict[str, list[float]] = {"unhealthy": [], "recovered": [], "push": []}
    try:
        target = bench.inventory.present[3].address
        for _ in range(flips):
            for kind, flip, seen in (
                (
                    "unhealthy",
                    lambda: monitor.unhealthy.__setitem__(target, "benchmark"),
                    lambda: target in bench.kubelet.unhealthy(GPU),
                ),
                ("recovered", monitor.unhealthy.clear, lambda: len(bench.kubelet.healthy(GPU)) == 8),
            ):
                time.sleep(rng.uniform(0, healthy_interval))
                start = time.monotonic()
                flip()
                bench.kubelet.wait_for(seen, timeout=30)
                received = bench.kubelet.updates[GPU][-1][0]
                check = max(t for t in monitor.checked if t <= received)  # the confirming reading (R-HEALTH)
                found[kind].append((received - start) * 1000)
                found["push"].append((received - check) * 1000)
        return found
    finally:
        bench.close()


class Echo(api_pb2_grpc.DevicePluginServicer):  # type: ignore[misc]
    def Allocate(self, request: Any, context: Any) -> Any:
        return api_pb2.AllocateResponse()


@contextlib.contextmanager
def echo_server() -> Iterator[Callable[[int], object]]:
    """P5's reference: a bare grpcio server on a unix socket answering Allocate with an empty response.
    Yields a call of Allocate for that many device IDs."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="dpe", dir="/tmp"))
    echo = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_DevicePluginServicer_to_server(Echo(), echo)
    echo.add_insecure_port(f"unix://{directory / 'echo.sock'}")
    echo.start()
    requests = {
        n: api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[f"GPU-{i}" for i in range(n)])]
        )
        for n in (1, 8)
    }
    try:
        with grpc.insecure_channel(f"unix://{directory / 'echo.sock'}") as channel:
            stub = api_pb2_grpc.DevicePluginStub(channel)
            stub.Allocate(requests[1], timeout=5)
            yield lambda n: stub.Allocate(requests[n], timeout=5)
    finally:
        echo.stop(0).wait()
        shutil.rmtree(directory, ignore_errors=True)


def echo_latencies(calls: int, devices: int) -> list[float]:
    with echo_server() as allocate:
        return timed(lambda: allocate(devices), calls)


SPIN = "while True: pass"
"""The fixed CPU load: one interpreter per core running this busy loop (no I/O, no allocation)."""


@contextlib.contextmanager
def cpu_load(processes: int) -> Iterator[int]:
    """``processes`` busy-loop subprocesses for the length of the block (then killed), at normal priority."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(processes)]
    try:
        time.sleep(0.2)  # every spinner is running before the first sample
        yield processes
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def alternating_latencies(calls: int, spinners: int) -> dict[int, tuple[list[float], list[float]]]:
    """Allocate (1 and 8 GPUs) and the echo of the same size, alternating call by call in one process
    (gpu-device's agent, the test kubelet and the echo server) under ``spinners`` busy loops, so both columns
    see the same load and the same interpreter; both send a request built beforehand on the test kubelet's
    channel (its `allocate` builds one per call, some 30 µs of the client's own). Per GPU count: (Allocate
    samples, echo samples)."""
    bench = Bench(healthy_interval=5.0, tick=0.5)
    try:
        ids = sorted(bench.kubelet.healthy(GPU))
        stub = bench.kubelet.endpoints[GPU].stub
        requests = {
            n: api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids[:n])])
            for n in (1, 8)
        }
        found: dict[int, tuple[list[float], list[float]]] = {}
        with echo_server() as echo, cpu_load(spinners):
            for n in (1, 8):
                allocate, reference = [], []
                for _ in range(calls):
                    allocate += timed(lambda: stub.Allocate(requests[n], timeout=5), 1)  # noqa: B023
                    reference += timed(lambda: echo(n), 1)  # noqa: B023
                found[n] = (allocate, reference)
        return found
    finally:
        bench.close()


HEALTH_SETTINGS = ((0.1, 0.02), (1.0, 0.5))
"""(healthy_interval, tick) in seconds: a fast setting, and one closer to production's 5 s / 0.5 s."""


def measure(calls: int, flips: int) -> tuple[list[tuple[str, float, float, float, int]], list[fig.Figure]]:
    """The module's table rows (name, p50, p99, max, n) and its P5/P6 figures, from one run."""
    latencies = rpc_latencies(calls)
    echoes = {n: echo_latencies(calls, n) for n in (1, 8)}
    rows = [(name, *percentiles(s), len(s)) for name, s in latencies]
    rows += [(f"reference: bare grpcio echo, Allocate {n} GPUs", *percentiles(s), len(s)) for n, s in echoes.items()]
    found = []
    for (name, samples), n in zip(latencies[:2], (1, 8), strict=True):
        p99, echo99 = percentiles(samples)[1], percentiles(echoes[n])[1]
        found.append(
            fig.Figure(
                id="P5",
                what=f"{name} p99 (gpu-device on its unix socket, {len(samples)} calls)",
                goal=fig.at_most(1.0, "ms"),
                value=p99,
                unit="ms",
                reference=f"bare grpcio echo on a unix socket, p99: {echo99:.3f} ms",
                reference_value=echo99,
            )
        )
    cores = len(os.sched_getaffinity(0))
    for spinners in (0, cores):
        load = f"{spinners} busy loops" if spinners else "no load"
        for n, (allocate, echo) in alternating_latencies(calls, spinners).items():
            p99, echo99 = percentiles(allocate)[1], percentiles(echo)[1]
            name = f"Allocate, {n} GPU{'s' if n > 1 else ''}"
            rows.append(
                (f"{name} (alternating, {load}: p99 {p99 / echo99:.2f}× the echo)", *percentiles(allocate), calls)
            )
            rows.append(
                (f"reference: bare grpcio echo, Allocate {n} GPUs (alternating, {load})", *percentiles(echo), calls)
            )
            found.append(
                fig.Figure(
                    id="P5",
                    what=f"{name} p99, {load} ({calls} calls alternating with the echo's)",
                    goal=fig.ratio_at_most(1.2, "under the same load"),
                    value=p99,
                    unit="ms",
                    reference=f"bare grpcio echo on a unix socket, alternating, p99: {echo99:.3f} ms",
                    reference_value=echo99,
                )
            )
    for interval, tick in HEALTH_SETTINGS:
        delays = health_delays(flips, interval, tick)
        label = f"interval {interval:g}s, tick {tick:g}s"
        rows.append((f"fault → kubelet sees it Unhealthy ({label})", *percentiles(delays["unhealthy"]), flips))
        rows.append((f"clear → kubelet sees it Healthy ({label})", *percentiles(delays["recovered"]), flips))
        rows.append((f"  of which confirming check → kubelet push ({label})", *percentiles(delays["push"]), 2 * flips))
        push99 = percentiles(delays["push"])[1]
        found.append(
            fig.Figure(
                id="P6",
                what=f"fault → kubelet sees it Unhealthy, p99 of {flips} ({label})",
                goal=fig.at_most(interval * 1000 + 1000, "ms", "interval + 1 s"),
                value=percentiles(delays["unhealthy"])[1],
                unit="ms",
                reference=f"confirming check → kubelet push alone, p99: {push99:.2f} ms",
            )
        )
        found.append(
            fig.Figure(
                id="P6",
                what=f"clear → kubelet sees it Healthy, p99 of {flips} ({label})",
                goal=fig.at_most(interval * 2000, "ms", "2 intervals"),
                value=percentiles(delays["recovered"])[1],
                unit="ms",
                reference=f"the interval: {interval * 1000:g} ms",
            )
        )
    withdrawn, readings, unknown = false_withdrawals(10_000, 0.01)
    rows.append(
        (
            f"false withdrawals in {readings} readings, {unknown} timed out (1 %)",
            withdrawn,
            withdrawn,
            withdrawn,
            readings,
        )
    )
    found.append(
        fig.Figure(
            id="P6",
            what=f"GPUs withdrawn while healthy, {readings} readings with the tool failing 1 % of them ({unknown})",
            goal=fig.at_most(0, "withdrawals"),
            value=withdrawn,
            unit="withdrawals",
            reference="the same readings without failures: 0",
        )
    )
    return rows, found


class FlakyMonitor:
    """Every GPU healthy, but the tool times out on a ``share`` of the readings (seeded)."""

    def __init__(self, addresses: Sequence[str], share: float) -> None:
        self.addresses = addresses
        self.share = share
        self.rng = random.Random(11)
        self.failed = 0

    def health(self) -> dict[str, GpuHealth]:
        if self.rng.random() < self.share:
            self.failed += 1
            raise HardwareError("query GPUs with mx-smi", None, "did not answer within 10 s and was killed")
        return {a: GpuHealth(PciAddress(a)) for a in self.addresses}


def false_withdrawals(readings: int, share: float) -> tuple[int, int, int]:
    """gpu-device's health reading (`services._agent.health.HealthWatch`, the core verdict machine) over
    ``readings`` readings 5 s apart of 8 healthy GPUs whose tool fails a ``share`` of them: how many times a GPU
    was withdrawn (turned not fine)."""
    functions = [PciFunction(PciAddress(f"0000:{b:02x}:00.0"), 0x9999, 0x4000) for b in range(1, 9)]
    monitor = FlakyMonitor([f.address for f in functions], share)
    clock = iter(range(0, readings * 5, 5))
    watch = health_watch.HealthWatch(
        "gpu-device", "bench", monitor=monitor, nodes=NoNodes(), events=None, wall=lambda: float(next(clock))
    )
    withdrawn = 0
    for _ in range(readings):
        withdrawn += sum(1 for change in watch.read(functions) if not change.after.fine)
    return withdrawn, readings, monitor.failed


class NoNodes:
    def get_node(self, name: str) -> None:
        return None

    def patch_node_metadata(self, name: str, **_: object) -> None:
        return None


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    logging.basicConfig(level=logging.ERROR)
    return measure(200 if quick else 2000, 3 if quick else 20)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--flips", type=int, default=20)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rows, found = measure(options.calls, options.flips)

    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'p50 ms':>9}  {'p99 ms':>9}  {'max ms':>9}  {'n':>5}")
    for name, p50, p99, worst, n in rows:
        print(f"{name:<{width}}  {p50:>9.3f}  {p99:>9.3f}  {worst:>9.3f}  {n:>5}")
    fig.print_figures(found, "P5, P6")
    return 0


if __name__ == "__main__":
    sys.exit(main())
