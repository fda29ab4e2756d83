"""The product as real pods on a real node: per component, pod created -> container started -> Ready, and the
peak RSS of each component inside its container next to the same agent as a host process (P8), same run.

Run from the repository root (root, cached binaries and images): ``python -m benchmarks.realpods [--settle 20]``.
It starts a loopback control plane with no kwok node, one real node (kubelet + containerd + runc) on a 2-GPU fake
host whose containerd imports the images ``./run images`` builds, installs the chart with ``helm install --wait``
exactly as ``tests/e2e/test_product.py`` does (`metax_dev.productnode.helm_release`), then

* reads each pod's creation time, its container's ``startedAt`` and its Ready condition (seconds, whole-second
  timestamps from the API server and the kubelet);
* after ``--settle`` seconds reads each container's main process (``ctr task ls`` on the node's containerd) peak
  resident memory, VmHWM in ``/proc/<pid>/status``, from the host;
* uninstalls, and starts the four agents ``metax_dev.agents`` runs as host processes in the node's namespaces on
  the same fake host and node (``python -m metax_dev.agents``: the fake host's adapters, the P8 setting of
  ``benchmarks/agents.py``),
  waits ``--settle`` seconds and reads their VmHWM the same way.

Every agent finishes its work in its container now (the test payload brings the fake host's mx-smi, which
driver-manager stages for every agent: docs/images.md), container-runtime and maca included (they configure and
restart the node's supervised containerd from their pods). The host-process agents run without those two, whose
readiness signals the benchmark publishes for them (gpu-device waits for both). Nothing is asserted. Printed as a
table.
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_core.node import readiness
from metax_dev import agents
from metax_dev.controlplane import cluster
from metax_dev.images import build as images_build
from metax_dev.productnode import helm_release
from metax_hw import hostfiles

COMPONENTS = ("metax-operator", *helm_release.AGENTS, *helm_release.DEPLOYMENTS)
HOST_AGENT = {
    "metax-gpu-label": "gpu-label",
    "metax-driver": "driver-manager",
    "metax-vfio-manager": "vfio-manager",
    "metax-gpu-device": "gpu-device",
}


def peak_rss_mib(proc: pathlib.Path) -> float:
    """VmHWM of the process whose ``/proc`` directory is ``proc``."""
    for line in (proc / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in {proc}")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pod_times(pod: dict[str, Any]) -> tuple[float | None, float | None]:
    """(created -> main container started, created -> Ready) in seconds."""
    created = _time(pod["metadata"]["creationTimestamp"])
    started = None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        running = status.get("state", {}).get("running")
        if running:
            started = (_time(running["startedAt"]) - created).total_seconds()
    return started, helm_release.ready_seconds(pod)


def task_pids(release: helm_release.Release) -> dict[str, int]:
    """Container id -> the pid of its main process, from the node's containerd (in the node's PID namespace)."""
    ctr = release.member.bin_dir / "ctr"
    done = subprocess.run(
        [str(ctr), "--address", str(release.member.containerd_socket), "-n", "k8s.io", "task", "ls"],
        capture_output=True,
        text=True,
        check=True,
    )
    pids = {}
    for line in done.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "RUNNING":
            pids[fields[0]] = int(fields[1])
    return pids


def stand_in_for_runtime_and_maca(host_root: pathlib.Path) -> None:
    """container-runtime and maca run no host process here: their readiness signals, which gpu-device waits for."""
    board = hostfiles.FileReadinessBoard(host_root)
    for component in ("container-runtime", "maca"):
        board.publish(readiness.ComponentReadiness(component, True, "benchmark: stand-in, not run as a host process"))


@attrs.frozen
class Measured:
    rows: dict[str, dict[str, str]]
    install: float
    uninstall: float
    node_with_images: float


def measure(settle: float) -> Measured:
    built = images_build.build()
    rows: dict[str, dict[str, str]] = {c: {} for c in COMPONENTS}
    with cluster.ControlPlane(nodes=0, verbosity=0) as plane, helm_release.real_node(plane, built) as release:
        began = time.monotonic()
        release.helm(*release.install_args())
        install = time.monotonic() - began

        def started() -> bool:
            found = {p["metadata"]["labels"].get("app.kubernetes.io/name"): p for p in helm_release.pods(release)}
            return all(c in found and pod_times(found[c])[0] is not None for c in COMPONENTS)

        helm_release.wait(started, "every component's container started", 180, lambda: "")
        time.sleep(settle)
        pids = task_pids(release)
        for pod in helm_release.pods(release):
            name = pod["metadata"]["labels"].get("app.kubernetes.io/name")
            if name not in rows or "job-name" in pod["metadata"]["labels"]:
                continue
            start, ready = pod_times(pod)
            rows[name]["started"] = f"{start:.0f}" if start is not None else "-"
            rows[name]["ready"] = f"{ready:.0f}" if ready is not None else "not Ready"
            container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
            rows[name]["pod rss"] = (
                f"{peak_rss_mib(release.member.proc(pids[container_id])):.1f}" if container_id in pids else "-"
            )
        began = time.monotonic()
        release.helm("uninstall", helm_release.RELEASE, "-n", helm_release.NAMESPACE, "--wait")
        uninstall = time.monotonic() - began

        # The same agents as host processes, on the same node and fake host (P8's setting).
        env = agents.environment(
            release.fake,
            node_name=release.node,
            kubeconfig=plane.kubeconfig_path,
            namespace=helm_release.NAMESPACE,
            payload=agents.write_payload(release.helm_home / "payload", helm_release.DRIVER_VERSION),
        )
        env["METAX_DRIVER_VERSION"] = helm_release.DRIVER_VERSION
        env["METAX_POD_RESOURCES_SOCKET"] = str(release.member.pod_resources_socket)
        env["METAX_LOG_LEVEL"] = "WARNING"
        stand_in_for_runtime_and_maca(release.fake.root)
        hosts = {c: release.member.spawn(f"host-{a}", agents.command(a), env) for c, a in HOST_AGENT.items()}
        try:
            time.sleep(settle)
            for component, process in hosts.items():
                pid = release.member.program_pid(process) if process.alive() else None
                rows[component]["host rss"] = (
                    f"{peak_rss_mib(pathlib.Path(f'/proc/{pid}')):.1f}" if pid is not None else "exited"
                )
        finally:
            for process in hosts.values():
                process.stop()

        return Measured(rows, install, uninstall, release.timings["node with images"])


def to_figures(m: Measured) -> list[fig.Figure]:
    found = []
    for component in COMPONENTS:
        r = m.rows[component]
        try:
            value = float(r.get("pod rss", "nan"))
        except ValueError:
            value = float("nan")
        if component == "metax-operator":
            pid, goal = "P3", fig.reported("one real node")
        elif component == "metax-data-exporter":
            pid, goal = "P7", fig.at_most(50.0, "MiB")
        elif component in helm_release.AGENTS:
            pid, goal = "P8", fig.at_most(60.0, "MiB")
        else:
            pid, goal = "P8", fig.reported("a Deployment, not a node agent")
        host = r.get("host rss")
        found.append(
            fig.Figure(
                id=pid,
                what=f"{component} peak RSS in its pod (helm install on a real node, 2-GPU fake host)",
                goal=goal,
                value=value,
                unit="MiB",
                reference=f"the same agent as a host process: {host} MiB" if host else "",
                error="" if value == value else f"no peak RSS read: {r.get('pod rss', 'no pod')}",
            )
        )
    return found


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    logging.basicConfig(level=logging.WARNING)
    return to_figures(measure(5.0 if quick else 20.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds the components run before RSS is read")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    m = measure(args.settle)
    rows, install, uninstall = m.rows, m.install, m.uninstall
    header = ("component", "created -> started (s)", "created -> Ready (s)", "peak RSS in pod (MiB)", "as host process")
    table = [header]
    for component in COMPONENTS:
        r = rows[component]
        table.append(
            (component, r.get("started", "-"), r.get("ready", "-"), r.get("pod rss", "-"), r.get("host rss", "-"))
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(f"\nnode with images imported: {m.node_with_images:.1f} s")
    print(f"helm install --wait: {install:.1f} s; helm uninstall --wait: {uninstall:.1f} s")
    print("P8 goal: <= 60 MiB per agent; host figures: the same agents with the fake host's adapters (full rounds)")
    print(json.dumps({"install_s": round(install, 1), "uninstall_s": round(uninstall, 1)}))
    fig.print_figures(to_figures(m), "P8 (in pods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
