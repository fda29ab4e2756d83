"""Node agents on a 16-GPU fake host against the real test control plane: peak memory (P8), writes in a
steady state, and the time from a ``driver-config`` VF edit to the new advertised count (R-VF).

Run from the repository root: ``python -m benchmarks.agents [--window 120] [--edits 3]``. It starts the
loopback control plane with one kwok node, builds a 16-GPU fake host with a payload driver, starts the test
kubelet and the four agents (gpu-label, driver-manager, vfio-manager, gpu-device) as processes with their
production intervals (`python -m metax_dev.agents`), waits until the node advertises, then

* counts writes by our field managers to the Node over ``--window`` seconds of quiet (the watch sees every
  change; a change that touches one of our managers' managedFields entries is one of ours) and scales
  it to an hour (goal: 0);
* edits the node's vfnum ``--edits`` times and times each edit until the kubelet sees GPUs × vfnum devices;
* reads each agent's peak resident memory (VmHWM in /proc/<pid>/status; goal P8: ≤ 60 MiB each).

Nothing is asserted: numbers depend on the machine. Printed as a table, with the goal beside each figure.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_core.node import readiness
from metax_dev.controlplane import cluster
from metax_dev.devicekubelet import Kubelet
from metax_hw import hostfiles
from metax_hw_fake import builder, kmods
from metax_k8s import client

GPUS = 16
PAYLOAD = "2.20.0"
NAMESPACE = "metax-operator"
AGENTS = ("gpu-label", "driver-manager", "vfio-manager", "gpu-device")
MANAGERS = ("metax-gpu-label", "metax-driver-manager", "metax-vfio-manager", "metax-gpu-device")


def wait(check: Callable[[], Any], what: str, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)
    return result


def peak_rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ours(node: dict[str, Any]) -> dict[str, str]:
    return {
        e["manager"]: f"{e.get('time')}|{e.get('fieldsV1')}"
        for e in node["metadata"].get("managedFields") or []
        if e.get("manager") in MANAGERS
    }


def count_our_writes(api: client.HttpApi, node: str, seconds: float) -> int:
    """Watch the Node for ``seconds``; count changes that touched one of our managers' entries."""
    current = api.get("v1", "Node", node)
    before, writes = ours(current), 0
    version = current["metadata"]["resourceVersion"]
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 1:
        for event in api.watch(
            "v1", "Node", field_selector=f"metadata.name={node}", resource_version=version, timeout_seconds=int(left)
        ):
            version = event.object["metadata"].get("resourceVersion", version)
            now = ours(event.object)
            writes += sum(1 for m, stamp in now.items() if before.get(m) != stamp)
            before = now
    return writes


@attrs.frozen
class Measured:
    rss: dict[str, float]
    bring_up: float
    writes: int
    window: float
    edit_times: list[float]


def measure(args: argparse.Namespace) -> Measured:
    work = pathlib.Path(tempfile.mkdtemp(prefix="agb", dir="/tmp"))
    processes: dict[str, subprocess.Popen[bytes]] = {}
    kubelet: Kubelet | None = None
    try:
        with cluster.ControlPlane(nodes=1, verbosity=0) as plane:
            node = plane.node_names[0]
            api = client.HttpApi(client.api_client(plane.kubeconfig_path))
            api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, field_manager="b")
            fake = builder.FakeHostBuilder().gpus(GPUS, numa_nodes=2, switches=4).build(work / "host")
            kmods.write_module_file(
                work / "payload/driver/metax.ko", "metax", PAYLOAD, "metax", [(0x9999, -1)], dict(builder.METAX_PARAMS)
            )
            kubelet = Kubelet(fake.root / "var/lib/kubelet/device-plugins").start()
            board = hostfiles.FileReadinessBoard(fake.root)
            for component in ("container-runtime", "maca"):  # no agents for these yet
                board.publish(readiness.ComponentReadiness(component, True, "benchmark"))
            env = {
                **fake.env(),
                "KUBECONFIG": str(plane.kubeconfig_path),
                "NODE_NAME": node,
                "METAX_HOST_ROOT": str(fake.root),
                "METAX_NAMESPACE": NAMESPACE,
                "METAX_DRIVER_VERSION": PAYLOAD,
                "METAX_PAYLOAD_DIR": str(work / "payload"),
                "METAX_LOG_LEVEL": "WARNING",
            }
            env.pop("KUBERNETES_SERVICE_HOST", None)
            for agent in AGENTS:
                with (work / f"{agent}.log").open("wb") as log:
                    processes[agent] = subprocess.Popen(
                        [sys.executable, "-m", "metax_dev.agents", agent], env=env, stdout=log, stderr=log, cwd=ROOT
                    )
            started = time.monotonic()
            wait(lambda: len(kubelet.healthy("metax-tech.com/gpu")) == GPUS, f"{GPUS} GPUs advertised")
            bring_up = time.monotonic() - started
            time.sleep(15)  # the last rounds after bring-up
            writes = count_our_writes(api, node, args.window)

            edit_times: list[float] = []
            for vfnum in [2, 4, 1, 3][: args.edits]:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "driver-config", "namespace": NAMESPACE},
                    "data": {"node-vfnums": f"nodes:\n  {node}:\n    vfnum: {vfnum}\n"},
                }
                began = time.monotonic()
                api.apply(body, field_manager="admin", force=True)
                wait(lambda v=vfnum: len(kubelet.healthy("metax-tech.com/gpu")) == GPUS * v, f"{GPUS}x{vfnum} VFs")
                edit_times.append(time.monotonic() - began)
            rss = {agent: peak_rss_mib(p.pid) for agent, p in processes.items()}
    finally:
        for p in processes.values():
            p.terminate()
        for p in processes.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if kubelet is not None:
            kubelet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return Measured(rss, bring_up, writes, args.window, edit_times)


def to_figures(m: Measured) -> list[fig.Figure]:
    found = [
        fig.Figure(
            id="P8",
            what=f"{agent} peak RSS (16-GPU fake host, production intervals)",
            goal=fig.at_most(60.0, "MiB"),
            value=mib,
            unit="MiB",
        )
        for agent, mib in m.rss.items()
    ]
    found.append(
        fig.Figure(
            id="P2",
            what=f"node agents' Node writes per hour in steady state ({m.window:.0f} s watched)",
            goal=fig.at_most(0, "/h"),
            value=m.writes * 3600 / m.window,
            unit="/h",
        )
    )
    return found


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--window", type=float, default=120.0, help="seconds of steady state to watch")
    parser.add_argument("--edits", type=int, default=3, help="driver-config VF edits to time")
    return parser.parse_args(argv)


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    logging.basicConfig(level=logging.WARNING)
    return to_figures(measure(options(["--window", "20", "--edits", "1"] if quick else [])))


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    logging.basicConfig(level=logging.WARNING)
    m = measure(args)
    rss, bring_up, writes, edit_times = m.rss, m.bring_up, m.writes, m.edit_times
    rows = [(f"peak RSS {agent} (16-GPU fake host)", f"{mib:.1f} MiB", "<= 60 MiB (P8)") for agent, mib in rss.items()]
    rows.append(("bare node to 16 GPUs advertised", f"{bring_up:.1f} s", "-"))
    rows.append(
        (f"our Node writes in {args.window:.0f} s of steady state", str(writes), "0"),
    )
    rows.append(("  = patches per node per hour", f"{writes * 3600 / args.window:.0f}", "0"))
    rows.append(
        (
            f"driver-config VF edit -> new advertised count (median of {len(edit_times)})",
            f"{statistics.median(edit_times):.1f} s (max {max(edit_times):.1f} s)",
            "minutes (R-VF)",
        )
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>24}  goal")
    for label, value, goal in rows:
        print(f"{label:<{width}}  {value:>24}  {goal}")
    fig.print_figures(to_figures(m), "P8, P2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
