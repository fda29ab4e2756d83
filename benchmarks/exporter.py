"""data-exporter scrape cost (P7): 16 GPUs with 4 VFs each (80 functions), a pod holding every VF.

Run from the repository root: ``python -m benchmarks.exporter [--scrapes 400]``. It builds a fake host, starts
a PodResources server on the kubelet's real v1 proto, runs ``metax-data-exporter`` as its own process (its
production sampling interval, 5 s) and, in the same run:

* scrapes ``/metrics`` ``--scrapes`` times back to back: latency p50 / p99 (goal p99 ≤ 10 ms);
* the reference: each scrape served by spawning the tool, as a collect-on-scrape exporter does (one mx-smi run
  through the same adapter, the same rendering), ``--reference`` times: p50 / p99, and the ratio of the p50s
  (goal ≥ 20×). The fake mx-smi is a Python program; the real one is a C program on libmxsml whose run time
  is not known here, so the ratio is only as good as that stand-in;
* the exporter's CPU per scrape (its utime + stime over the scrapes, less what it spent over as long a window
  without scrapes) and its resident memory (VmRSS and peak VmHWM; goal ≤ 50 MiB).

``--mxsml``: the exporter samples through libmxsml (the fake library compiled from metax_hw_fake/libmxsml_fake.c,
installed on the fake host) instead of mx-smi; the reference still spawns mx-smi.

Nothing is asserted: numbers depend on the machine. Printed as a table, with the goal beside each figure.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import prometheus_client

from benchmarks import figures as fig
from metax_core.metrics import exposition, telemetry
from metax_hw_fake import builder
from services.data_exporter import collector
from tests.services.exporter.kubelet_podresources import PodResourcesServer

GPUS, VFS = 16, 4
SAMPLE_INTERVAL = 5.0  # the production default (exporter.sampleInterval)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_mib(pid: int) -> dict[str, float]:
    found = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return bytes(response.read())


def measure(args: argparse.Namespace) -> tuple[list[tuple[str, str, str]], list[fig.Figure]]:
    """The module's table rows (measure, value, goal) and its P7 figures, from one run."""
    with tempfile.TemporaryDirectory(prefix="metax-bench-exporter-") as tmp:
        work = pathlib.Path(tmp)
        fake = builder.FakeHostBuilder().gpus(GPUS).host_driver("2.18.0").vfs(VFS).build(work / "host")
        functions = fake.devices.functions()
        vfs = [f.address for f in functions if f.physfn is not None]
        kubelet = PodResourcesServer(work / "kubelet.sock").start()
        kubelet.set(*[("bench", f"job-{i}", "main", "metax-tech.com/gpu", [vf]) for i, vf in enumerate(vfs)])
        port = free_port()
        source = {"METAX_EXPORTER_MXSML_LIBRARY": str(fake.install_mxsml()) if args.mxsml else ""}
        env = dict(
            fake.env(),
            NODE_NAME="bench-node",
            METAX_HOST_ROOT=str(fake.root),
            METAX_EXPORTER_ADDRESS="127.0.0.1",
            METAX_EXPORTER_PORT=str(port),
            METAX_POD_RESOURCES_SOCKET=str(kubelet.socket),
            METAX_LOG_LEVEL="WARNING",
            METAX_EXPORTER_SAMPLE_INTERVAL=str(SAMPLE_INTERVAL),
            **source,
        )
        exporter = subprocess.Popen([sys.executable, "-m", "services.data_exporter"], env=env, cwd=ROOT)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    body = scrape(url)
                    source_seen = b'uuid="GPU-' in body if args.mxsml else b'uuid=""' in body  # only libmxsml has UUIDs
                    if body.count(b'pod="job-') >= len(vfs) and b"\nmx_gpu_usage{" in body and source_seen:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or exporter.poll() is not None:
                    raise SystemExit("the exporter did not serve the node's GPUs")
                time.sleep(0.2)
            for _ in range(20):
                scrape(url)  # warm up
            latencies: list[float] = []
            cpu_before, wall_before = cpu_seconds(exporter.pid), time.perf_counter()
            for _ in range(args.scrapes):
                started = time.perf_counter()
                body = scrape(url)
                latencies.append(time.perf_counter() - started)
            window = time.perf_counter() - wall_before
            cpu_scrapes = cpu_seconds(exporter.pid) - cpu_before
            idle_window = max(window, 3 * SAMPLE_INTERVAL)  # at least a few samplings: they are the idle cost
            cpu_idle_before = cpu_seconds(exporter.pid)
            time.sleep(idle_window)
            cpu_idle = (cpu_seconds(exporter.pid) - cpu_idle_before) * window / idle_window
            memory = memory_mib(exporter.pid)
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))

            # The reference: collect on the scrape path (spawn the tool, then render the same way).
            options = exposition.Options(hostname="bench-node")
            spawned: list[float] = []
            for _ in range(args.reference):
                started = time.perf_counter()
                sample = telemetry.advance(telemetry.Sample(), fake.monitor.telemetry(), time.monotonic())
                registry = prometheus_client.CollectorRegistry(auto_describe=False)
                view = collector.View(sample=sample)
                registry.register(collector.SampleCollector(lambda view=view: view, options, time.monotonic))
                prometheus_client.generate_latest(registry)
                spawned.append(time.perf_counter() - started)
        finally:
            exporter.terminate()
            exporter.wait(timeout=30)
            kubelet.stop()

    ms = 1000.0
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    r50, r99 = percentile(spawned, 50), percentile(spawned, 99)
    rows = [
        ("telemetry source", "libmxsml (fake)" if args.mxsml else "mx-smi (fake)", ""),
        ("functions (GPUs + VFs)", f"{len(functions)} ({GPUS} + {len(vfs)})", ""),
        ("series per scrape", f"{series}", ""),
        ("scrape p50 (latest sample)", f"{p50 * ms:.2f} ms", ""),
        ("scrape p99 (latest sample)", f"{p99 * ms:.2f} ms", "≤ 10 ms"),
        ("scrape p50 (spawn the tool)", f"{r50 * ms:.1f} ms", "reference"),
        ("scrape p99 (spawn the tool)", f"{r99 * ms:.1f} ms", "reference"),
        ("speed-up (p50 / p50)", f"{r50 / p50:.0f}×", "≥ 20×"),
        ("exporter CPU per scrape", f"{(cpu_scrapes - cpu_idle) / args.scrapes * ms:.2f} ms", ""),
        ("exporter CPU without scrapes", f"{cpu_idle / window * 100:.2f} % of a core", ""),
        ("exporter RSS now / peak", f"{memory.get('VmRSS', 0):.1f} / {memory.get('VmHWM', 0):.1f} MiB", "≤ 50 MiB"),
        ("scrapes / reference runs", f"{args.scrapes} / {args.reference}", ""),
    ]
    setting = f"{GPUS} GPUs + {len(vfs)} VFs"
    found = [
        fig.Figure(
            id="P7",
            what=f"data-exporter scrape p99 ({setting}, {args.scrapes} scrapes)",
            goal=fig.at_most(10.0, "ms"),
            value=p99 * ms,
            unit="ms",
            reference=f"spawning the tool per scrape, p99: {r99 * ms:.1f} ms",
            reference_value=r99 * ms,
        ),
        fig.Figure(
            id="P7",
            what="data-exporter scrape p50, speed-up over spawning the tool per scrape",
            goal=fig.speedup_at_least(20.0),
            value=p50 * ms,
            unit="ms",
            reference=f"spawning the tool per scrape, p50: {r50 * ms:.1f} ms ({args.reference} runs)",
            reference_value=r50 * ms,
        ),
        fig.Figure(
            id="P7",
            what="data-exporter peak RSS (VmHWM) after the scrapes",
            goal=fig.at_most(50.0, "MiB"),
            value=memory.get("VmHWM", float("nan")),
            unit="MiB",
            reference=f"its RSS now: {memory.get('VmRSS', 0):.1f} MiB",
        ),
    ]
    return rows, found


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exporter", description=__doc__.split("\n")[0])
    parser.add_argument("--scrapes", type=int, default=400)
    parser.add_argument("--reference", type=int, default=30)
    parser.add_argument("--mxsml", action="store_true", help="sample through the fake libmxsml instead of mx-smi")
    return parser.parse_args(argv)


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    return measure(options(["--scrapes", "100", "--reference", "10"] if quick else []))[1]


def main(argv: list[str] | None = None) -> int:
    rows, found = measure(options(argv))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>24}  goal")
    for label, value, goal in rows:
        print(f"{label:<{width}}  {value:>24}  {goal}")
    fig.print_figures(found, "P7")
    return 0


if __name__ == "__main__":
    sys.exit(main())
