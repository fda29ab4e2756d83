"""How long real test nodes take to build, to come up, to run a pod and a device plugin, to go.

Why this module exists: every ``./run test`` brings up real nodes (tests/realnode), so their costs
are measured, not guessed. Nothing is asserted: the numbers depend on the machine and its load.

Run from the repository root (as root)::

    python -m benchmarks.realnode_startup [--runs 3] [--rebuild]

Rows: a build that finds its binaries in the cache; with ``--rebuild`` a build with warm Go caches but
no cached binaries (what editing a main, go.mod or pause.c costs: every binary is linked again); one
node from launch to Ready, and its phases (mount namespace, containerd, images, kubelet registered);
a busybox pod from create to Running; the gpu-device agent from its start to ``metax-tech.com/gpu``
allocatable; a kubelet restart to Ready; one node's teardown; two nodes up and down.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kubernetes import client

from metax_core.node import readiness
from metax_dev.controlplane import build, cluster
from metax_dev.realnode import images, launcher
from metax_hw import hostfiles
from metax_hw_fake import builder
from services.gpu_device import config


def _wait(predicate: Callable[[], bool], timeout: float = 120.0) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError("timed out")
        time.sleep(0.05)
    return time.monotonic() - started


def _fmt(values: Sequence[float]) -> str:
    return f"{statistics.median(values):6.1f}" + (
        f"  ({', '.join(f'{v:.1f}' for v in values)})" if len(values) > 1 else ""
    )


def _one_run(plane: cluster.ControlPlane, rows: dict[str, list[float]], run: int) -> None:
    def add(label: str, seconds: float | None) -> None:
        rows.setdefault(label, []).append(seconds if seconds is not None else float("nan"))

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="metax-bench-gpuhost-"))
    fake = builder.FakeHostBuilder().gpus(4).build(scratch / "host")
    board = hostfiles.FileReadinessBoard(fake.root)
    for component in config.default_required():
        board.publish(readiness.ComponentReadiness(component, True, "benchmark"))
    api = plane.api_client()
    core = client.CoreV1Api(api)
    try:
        nodes = launcher.RealNodes(plane, 0, prefix=f"bench{run}")
        nodes.start()
        try:
            started = time.monotonic()
            member = nodes.add_node(device_root=fake.root)
            add("one node: launch to Ready", time.monotonic() - started)
            t = member.timings
            add("  mount namespace", t.namespace)
            add("  + containerd serving", (t.containerd or 0) - (t.namespace or 0))
            add("  + images imported", (t.images or 0) - (t.containerd or 0))
            add("  + kubelet registered the Node", (t.kubelet_registered or 0) - (t.images or 0))
            add("  + Node Ready", (t.ready or 0) - (t.kubelet_registered or 0))

            pod = {
                "metadata": {"name": "bench"},
                "spec": {
                    "nodeName": member.name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": images.BUSYBOX_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                        }
                    ],
                },
            }
            started = time.monotonic()
            core.create_namespaced_pod("default", pod)
            _wait(lambda: core.read_namespaced_pod("bench", "default").status.phase == "Running")
            add("busybox pod: create to Running", time.monotonic() - started)
            core.delete_namespaced_pod("bench", "default", grace_period_seconds=0)

            env = {
                **fake.env(),
                "NODE_NAME": member.name,
                "METAX_HOST_ROOT": str(fake.root),
                "KUBECONFIG": str(plane.kubeconfig_path),
                "PYTHONPATH": str(ROOT),
            }
            started = time.monotonic()
            agent = member.spawn(
                "gpu-device",
                [sys.executable, "-m", "services.gpu_device"],
                {k: env[k] for k in ("PATH", "NODE_NAME", "METAX_HOST_ROOT", "KUBECONFIG", "PYTHONPATH")},
            )
            try:
                _wait(lambda: (core.read_node(member.name).status.allocatable or {}).get("metax-tech.com/gpu") == "4")
                add("gpu-device start to 4 allocatable GPUs", time.monotonic() - started)
                add("kubelet restart (SIGTERM to healthz and Ready)", member.restart_kubelet())
            finally:
                agent.stop()
            started = time.monotonic()
            nodes.stop()
            add("one node: teardown", time.monotonic() - started)
        finally:
            nodes.stop()
        started = time.monotonic()
        two = launcher.RealNodes(plane, 2, prefix=f"pair{run}").start()
        add("two nodes: launch to both Ready", time.monotonic() - started)
        started = time.monotonic()
        two.stop()
        add("two nodes: teardown", time.monotonic() - started)
    finally:
        api.close()  # type: ignore[no-untyped-call]
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rebuild", action="store_true", help="also relink everything with warm Go caches")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows: dict[str, list[float]] = {}
    if args.rebuild:
        with tempfile.TemporaryDirectory(prefix="metax-bench-bin-") as scratch:
            rows["build, warm Go caches, no cached binaries"] = [
                build.build(cache_dir=pathlib.Path(scratch), quiet=True).seconds
            ]
    warm = build.build(quiet=True)
    rows["build with cached binaries"] = [warm.seconds]
    with cluster.ControlPlane(nodes=0, bin_dir=warm.bin_dir) as plane:
        for run in range(args.runs):
            _one_run(plane, rows, run)
    width = max(len(label) for label in rows)
    print(f"{'measurement':<{width}}  seconds (median, runs)")
    for label, values in rows.items():
        print(f"{label:<{width}}  {_fmt(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
