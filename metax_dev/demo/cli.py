"""`./run demo` (`python -m metax_dev.demo`, `metax-dev demo`): the product itself, in one process.

The operator and every node agent, from the same composition roots the images run, on the in-memory API
server and N fake GPU hosts (`fleet`); a live view of nodes × components (`view`); then the scripted scenario
(`scenario`): each step prints what an administrator types and what the cluster now says, and checks it.
Exit 0 when every step reached its outcome, 1 when one did not (the rest are skipped).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.live import Live

from metax_core.errors import MetaxError
from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import realcli, scenario, standins, view

EXIT_OK, EXIT_FAILED = 0, 1


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
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    prepare: Callable[[demo_fleet.Fleet], None] | None = None,
    control_plane: controlplane.ControlPlane | None = None,
) -> int:
    """``prepare`` runs on the fleet before the scenario (tests inject faults the scenario does not expect, or
    read the hosts). ``control_plane``: with ``--cluster real``, a started one to use instead of starting one
    (the tests' session control plane); it is left running."""
    args = parser().parse_args(argv)
    if args.nodes < 2:
        parser().error("--nodes must be at least 2 (one node takes the VF change, another the vfio binding)")
    if args.keep and args.cluster != "real":
        parser().error("--keep goes with --cluster real")
    console = Console() if Console().is_terminal else Console(width=160)
    if args.cluster == "real":
        return realcli.run(console, args, prepare, control_plane, _scenario)
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
    steps = scenario.steps(f)
    done = threading.Event()
    with Live(view.table(f), console=console, refresh_per_second=4) if live else _NoLive() as shown:
        if live:
            threading.Thread(target=_refresh, args=(shown, f, done), daemon=True).start()
        try:
            for number, step in enumerate(steps, 1):
                console.rule(f"[bold]{number}/{len(steps)} {step.title}")
                for command in step.commands:
                    console.print(f"$ {command}", markup=False, highlight=False)
                began = time.monotonic()
                try:
                    said = step.run(f)
                except (scenario.StepFailed, MetaxError, OSError) as exc:
                    console.print(f"[red]step failed[/red]: {exc}", highlight=False)
                    for line in view.lines(f):
                        console.print(f"  {line}", markup=False, highlight=False)
                    _log_tail(console, f)
                    return EXIT_FAILED
                for line in said:
                    console.print(f"  {line}", markup=False, highlight=False)
                console.print(f"  [green]ok[/green] ({time.monotonic() - began:.1f}s)")
                if not live:
                    for line in view.lines(f):
                        console.print(f"  | {line}", markup=False, highlight=False)
        finally:
            done.set()
    return EXIT_OK


def _log_tail(console: Console, f: demo_fleet.Fleet, lines: int = 15) -> None:
    """The last warnings of the operator and the agents (the demo's log is deleted with its directory; on the
    real cluster the operator process writes its own)."""
    for log in [f.workdir / "demo.log", *sorted(f.workdir.glob("operator-*.log"))]:
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        console.print(f"last lines of {log.name}:")
        for line in tail:
            console.print(f"  {line}", markup=False, highlight=False)


def _refresh(shown: Live, f: demo_fleet.Fleet, done: threading.Event) -> None:
    while not done.wait(0.25):
        try:
            shown.update(view.table(f, title="nodes × components (live)"))
        except (MetaxError, OSError):  # a real API server's moment of refusal: the next refresh shows it again
            continue


class _NoLive:
    def __enter__(self) -> Live:
        return None  # type: ignore[return-value]

    def __exit__(self, *exc: object) -> None:
        return None
