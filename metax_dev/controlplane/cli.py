"""The shell face of the test control plane: ``python -m metax_dev.controlplane up|build|versions``.

Why this module exists: developers start a cluster by hand to poke at the operator with kubectl,
and CI may build the binaries as a step of its own. :func:`up` is also what
``metax-dev cluster up`` calls.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from metax_dev.controlplane import build, cluster, errors


def up(nodes: int = 3, *, workloads: bool = True) -> None:
    """Start a cluster with ``nodes`` kwok nodes, print how to reach it, run until Ctrl-C."""
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with cluster.ControlPlane(nodes=nodes, workloads=workloads) as plane:
            print(f"kubeconfig: {plane.kubeconfig_path}")
            print(f"server:     {plane.server_url}")
            print(f"nodes:      {', '.join(plane.node_names) or '-'}")
            print(f"timings:    {plane.timings.summary()}")
            print(f"logs:       {plane.workdir / 'logs'}")
            print(
                f"\nexport KUBECONFIG={plane.kubeconfig_path}\n\nCtrl-C stops the cluster.",
                flush=True,
            )
            while not stop_requested.wait(1.0):
                dead = plane.dead_components()
                if dead:
                    raise errors.ControlPlaneError(f"{', '.join(dead)} exited; see {plane.workdir / 'logs'}")
            print("stopping ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metax_dev.controlplane",
        description="Build and run the MetaX operator's loopback Kubernetes test control plane.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="start a cluster and wait for Ctrl-C")
    up_parser.add_argument("--nodes", type=int, default=3, help="kwok nodes to create (default 3)")
    up_parser.add_argument("--no-workloads", action="store_true", help="no controller-manager and scheduler")
    build_parser = sub.add_parser("build", help="build (or reuse) the binaries and print where")
    build_parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("versions", help="print the upstream versions built")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "up":
            up(args.nodes, workloads=not args.no_workloads)
        elif args.command == "build":
            result = build.build(force=args.force)
            print(result.bin_dir)
        else:
            for name, version in build.module_versions().items():
                print(f"{name} {version}")
    except errors.ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
