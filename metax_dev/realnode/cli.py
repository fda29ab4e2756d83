"""The shell face of the real-node launcher: ``python -m metax_dev.realnode up|down``.

Why this module exists: a developer who wants to see a pod really run (and get a fake MetaX GPU)
starts a control plane with real nodes by hand and pokes at it with the kubectl built here. ``up``
runs in the foreground and tears everything down on Ctrl-C or SIGTERM; ``down`` cleans up after a
launcher that was killed outright (see :func:`metax_dev.realnode.launcher.reap_stale`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from metax_dev.controlplane import cluster, errors
from metax_dev.realnode import launcher


def up(nodes: int = 1, *, kwok_nodes: int = 0) -> None:
    """A control plane with ``nodes`` real nodes (and ``kwok_nodes``); runs until Ctrl-C."""
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with cluster.ControlPlane(nodes=kwok_nodes) as plane, launcher.RealNodes(plane, nodes) as real:
            assert plane.bin_dir is not None
            print(f"kubeconfig: {plane.kubeconfig_path}")
            print(f"kubectl:    {plane.bin_dir / 'kubectl'}")
            print(f"real nodes: {', '.join(real.names)} (up in {real.started_seconds or 0:.1f}s)")
            print(f"work dir:   {real.workdir}")
            print(
                f"\nexport KUBECONFIG={plane.kubeconfig_path}\n"
                f"alias kubectl={plane.bin_dir / 'kubectl'}\n\nCtrl-C stops everything.",
                flush=True,
            )
            while not stop_requested.wait(1.0):
                dead = plane.dead_components() + real.dead_components()
                if dead:
                    raise errors.ControlPlaneError(f"{', '.join(dead)} exited")
            print("stopping ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metax_dev.realnode",
        description="Real test nodes (kubelet + containerd + runc built here) on a loopback control plane.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="start a control plane with real nodes; Ctrl-C stops it")
    up_parser.add_argument("--nodes", type=int, default=1, help="real nodes (default 1)")
    up_parser.add_argument("--kwok-nodes", type=int, default=0, help="kwok nodes as well (default 0)")
    sub.add_parser("down", help="clean up after a launcher that was killed (processes, cgroups, sysctls)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "up":
            up(args.nodes, kwok_nodes=args.kwok_nodes)
        else:
            for line in launcher.reap_stale():
                print(line)
    except errors.ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
