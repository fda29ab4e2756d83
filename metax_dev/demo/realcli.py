"""`metax-dev demo --cluster real`: the scenario on the Go-built control plane, and how to watch and keep it.

Why a module of its own: the in-memory demo is one process that is gone when it ends; this one starts (or is
given) a control plane, prints its kubeconfig and the ``kubectl ... -w`` command to watch it from another
terminal before the scenario starts, and afterwards either tears everything down (the fleet's processes and
nodes, the control plane, the temporary directory) or, with ``--keep``, leaves it running until Ctrl-C or
SIGTERM and then tears it down the same way. A scenario that passed ended with the uninstall, so ``--keep``
installs ``cluster-operator`` again first (the agents come back to be watched); after a failed step it keeps
the cluster as the step left it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from rich.console import Console

from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import realfleet
from metax_dev.demo import scenario as scenario_steps

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
WATCH = "get clusteroperator,ds,nodes -w"

STAND_INS = (
    "GPU nodes: process nodes (docs/processnode.md): the DaemonSets' pods run as local processes, each node on "
    "its own fake GPU host; an image's entrypoint and a payload image's files are stand-ins",
    "kubelet device manager: gpu-device's plugins register over gRPC with a test kubelet on the fake host; "
    "allocatable and a GPU pod's devices come from there",
    "container-runtime: no containerd to configure: its pod runs a stand-in that publishes its readiness and "
    "answers the uninstall request",
    "CPU nodes: kwok nodes; gpu-label's process runs beside its kwok pod against a fake host without GPUs",
)

Scenario = Callable[[Console, demo_fleet.Fleet, bool], int]
Body = Callable[[controlplane.ControlPlane, Path], int]
"""What runs on the started control plane, in the demo's directory; its exit code."""


def log_into(workdir: Path) -> None:
    """The demo's own log (warnings and up, every thread) in its directory: the console is the scenario's."""
    logging.basicConfig(
        level=logging.WARNING,
        filename=str(workdir / "demo.log"),
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
        force=True,
    )


def kubeconfig(plane: controlplane.ControlPlane, workdir: Path) -> Path:
    """The control plane's admin kubeconfig with the operator's namespace as its context's default, so
    ``kubectl get clusteroperator,ds,nodes`` lists the agents' DaemonSets (in the demo's directory: it goes with
    the demo)."""
    config = json.loads(plane.kubeconfig_path.read_text())
    for context in config.get("contexts") or []:
        context.setdefault("context", {})["namespace"] = realfleet.NAMESPACE
    path = workdir / "kubeconfig"
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def watch_commands(plane: controlplane.ControlPlane, config: Path) -> list[str]:
    """The command to watch the cluster from another terminal, and the same with the control plane's kubectl."""
    commands = [f"KUBECONFIG={config} kubectl {WATCH}"]
    kubectl = plane.bin_dir / "kubectl" if plane.bin_dir is not None else None
    if kubectl is not None and kubectl.exists():
        commands.append(f"KUBECONFIG={config} {kubectl} {WATCH}")
    return commands


def run(console: Console, plane: controlplane.ControlPlane | None, body: Body) -> int:
    """``body`` on ``plane`` (None: a control plane started here, and stopped after), in a temporary directory,
    Ctrl-C and SIGTERM tearing down what was started."""
    started = time.monotonic()
    own = plane is None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM tears down as Ctrl-C does
    try:
        return _run(console, plane, body, started, own)
    except KeyboardInterrupt:  # raised where it was, after every `finally` on the way tore its part down
        console.print(f"interrupted: torn down after {time.monotonic() - started:.1f}s")
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run(console: Console, plane: controlplane.ControlPlane | None, body: Body, started: float, own: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="mxd-", dir="/tmp") as tmp:  # /tmp: unix socket paths are short
        workdir = Path(tmp)
        log_into(workdir)
        try:
            if plane is None:
                console.print(
                    "Starting the control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                    "kwok (built from their Go modules once, cached under ~/.cache/metax-operator) ..."
                )
                plane = controlplane.ControlPlane(nodes=0).start()
            code = body(plane, workdir)
        finally:
            if own and plane is not None:
                plane.stop()
        console.print(f"{'Done' if code == EXIT_OK else 'FAILED'} in {time.monotonic() - started:.1f}s")
    return code


def on_fleet(
    console: Console,
    args: argparse.Namespace,
    prepare: Callable[[demo_fleet.Fleet], None] | None,
    plane: controlplane.ControlPlane,
    workdir: Path,
    scenario: Scenario,
) -> int:
    """The scenario on process nodes and kwok CPU nodes of ``plane`` (`realfleet`)."""
    f = realfleet.RealFleet(workdir, plane, args.nodes)
    try:
        console.print(
            f"[bold]MetaX GPU Operator demo on a real control plane[/bold]: the operator (a process) and its node "
            f"agents (the DaemonSets' pods) on {args.nodes} GPU nodes ({demo_fleet.gpu_total(f.nodes)} GPUs) "
            f"and {len(f.cpu_nodes)} kwok CPU nodes; kube-apiserver at {plane.server_url}"
        )
        console.print("What stands in for what needs real hardware or daemons:")
        for line in STAND_INS:
            console.print(f"  - {line}")
        config = kubeconfig(plane, workdir)
        console.print(f"kubeconfig: {config} (the admin's, namespace {realfleet.NAMESPACE})")
        console.print("watch it from another terminal:")
        for command in watch_commands(plane, config):
            console.print(f"  {command}", markup=False, highlight=False)
        if prepare is not None:
            prepare(f)
        f.start()
        code = scenario(console, f, not args.no_live)
        if f.errors:
            console.print(f"[red]stand-in errors[/red]: {f.errors[:3]}")
            code = EXIT_FAILED
        if args.keep:
            if code == EXIT_OK:  # the scenario ended with the uninstall: install again, to have agents to watch
                f.objects.apply(scenario_steps.cluster_operator(f.pod_template), field_manager="helm")
                console.print("--keep: cluster-operator installed again (the scenario's install): the agents come back")
            keep(console, plane, config)
    finally:
        f.stop()
    return code


def keep(
    console: Console,
    plane: controlplane.ControlPlane,
    config: Path,
    what: str = "the nodes with their agents and the operator",
) -> None:
    """Until Ctrl-C or SIGTERM: the control plane, the nodes, their agents and the operator keep running."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        console.print(
            f"--keep: the control plane, {what} keep running "
            f"(KUBECONFIG={config}); Ctrl-C or SIGTERM (kill {os.getpid()}) uninstalls, stops and "
            "removes everything."
        )
        while not stop.wait(1.0):
            dead = plane.dead_components()
            if dead:
                console.print(f"[red]{', '.join(dead)} exited[/red]; stopping")
                break
        console.print("stopping ...")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
