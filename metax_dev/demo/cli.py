"""`./run demo` (`python -m metax_dev.demo`, `metax-dev demo`): the product itself, in one process.

The operator and every node agent, from the same composition roots the images run, on the in-memory API
server and N fake GPU hosts (`fleet`); a live view of nodes × components (`view`); then the scripted scenario
(`scenario`): each step prints what an administrator types and what the cluster now says, and checks it.
Exit 0 when every step reached its outcome, 1 when one did not (the rest are skipped).
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import player, realcli, scenario, standins, view

EXIT_OK, EXIT_FAILED = 0, 1
if TYPE_CHECKING:
    from metax_dev.demo.realnode import Observer


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="metax-dev demo",
        description="The MetaX GPU Operator and its node agents on an in-memory cluster with fake GPU hosts.",
    )
    p.add_argument("--nodes", type=int, default=4, help="fake GPU nodes (default 4, mixed GPU counts; at least 2)")
    p.add_argument("--no-live", action="store_true", help="plain logs instead of the live view")
    p.add_argument(
        "--cluster",
        choices=("memory", "real"),
        default="memory",
        help="memory: the in-memory API server, one process (default); real: the Go-built loopback control "
        "plane (etcd, kube-apiserver, controller-manager, scheduler, kwok), GPU nodes as process nodes",
    )
    p.add_argument(
        "--keep", action="store_true", help="with --cluster real: keep it running after the scenario until Ctrl-C"
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help="with --cluster real: the product from its images, installed with helm, on a real node (kubelet, "
        "containerd, runc built here) over a fake 2-GPU host; the steps a real node can run (docs/demo.md)",
    )
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    prepare: Callable[[demo_fleet.Fleet], None] | None = None,
    control_plane: controlplane.ControlPlane | None = None,
    observe: Observer | None = None,
) -> int:
    """``prepare`` runs on the fleet before the scenario (tests inject faults the scenario does not expect, or
    read the hosts). ``control_plane``: with ``--cluster real``, a started one to use instead of starting one
    (the tests' session control plane); it is left running. ``observe``: with ``--real-node``, called with the
    node before the install and once more after the scenario, before the teardown (tests read the host)."""
    args = parser().parse_args(argv)
    if args.nodes < 2:
        parser().error("--nodes must be at least 2 (one node takes the VF change, another the vfio binding)")
    if (args.keep or args.real_node) and args.cluster != "real":
        parser().error("--keep and --real-node go with --cluster real")
    console = Console() if Console().is_terminal else Console(width=160)
    if args.cluster == "real":
        if args.real_node:
            from metax_dev.demo import realnode  # the kubernetes client: not in the images, whose metax-dev has --help

            return realcli.run(console, control_plane, functools.partial(realnode.on_node, console, args, observe))
        return realcli.run(
            console,
            control_plane,
            lambda plane, workdir: realcli.on_fleet(console, args, prepare, plane, workdir, _scenario),
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="metax-demo-", dir="/tmp") as tmp:  # /tmp: unix socket paths are short
        workdir = Path(tmp)
        realcli.log_into(workdir)
        f = demo_fleet.InMemoryFleet(workdir, args.nodes)
        console.print(
            f"[bold]MetaX GPU Operator demo[/bold]: the operator and its node agents on {args.nodes} fake GPU nodes "
            f"({demo_fleet.gpu_total(f.nodes)} GPUs), an in-memory API server, one process"
        )
        console.print("In-process stand-ins for what needs real daemons:")
        for line in standins.STAND_INS:
            console.print(f"  - {line}")
        if prepare is not None:
            prepare(f)
        f.start()
        try:
            code = _scenario(console, f, live=not args.no_live)
        finally:
            f.stop()
        if f.errors:
            console.print(f"[red]stand-in errors[/red]: {f.errors[:3]}")
            code = EXIT_FAILED
        console.print(f"{'Done' if code == EXIT_OK else 'FAILED'} in {time.monotonic() - started:.1f}s")
    return code


def _scenario(console: Console, f: demo_fleet.Fleet, live: bool) -> int:
    logs = [f.workdir / "demo.log", *sorted(f.workdir.glob("operator-*.log"))]
    return player.play(
        console,
        scenario.steps(f),
        f,
        lines=lambda: view.lines(f),
        table=(lambda: view.table(f, title="nodes × components (live)")) if live else None,
        logs=logs,
    )
