"""One container on a process node: its state, and its process group.

Why a module of its own: the pod worker (`worker`) decides when a container starts, restarts and stops; this is
what a container is meanwhile — the fields its status is made of — and how its process is started and
stopped. Each container's command runs through ``setpriv --pdeathsig KILL`` in a session of its own, so it dies
with the worker thread that started it and its whole process group can be signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from metax_dev.processnode import podspec, status

#: Restart back-off: first delay and cap, in seconds (the kubelet: 10 s and 300 s; shorter for tests).
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
#: A container that ran this long has its back-off reset.
BACKOFF_RESET = 60.0


class Container:
    """One container of a pod: its plan, its process, and what its status reports."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.image = str(spec.get("image", ""))
        self.plan: podspec.ContainerPlan | None = None
        self.popen: subprocess.Popen[bytes] | None = None
        self.log: BinaryIO | None = None
        self.state = status.State.WAITING
        self.reason = "ContainerCreating"
        self.message = ""
        self.started_at = ""
        self.started_mono = 0.0
        self.terminated: status.Terminated | None = None
        self.restart_count = 0
        self.ready = False
        self.will_restart = True
        self.next_start = 0.0
        self.backoff = BACKOFF_FIRST
        self.probe_next: dict[str, float] = {}
        self.probe_ok: dict[str, int] = {}
        self.probe_bad: dict[str, int] = {}

    def snapshot(self) -> status.Container:
        return status.Container(
            name=self.name,
            image=self.image,
            state=self.state,
            restart_count=self.restart_count,
            ready=self.ready,
            reason=self.reason,
            message=self.message,
            started_at=self.started_at,
            terminated=self.terminated,
            pid=self.popen.pid if self.popen is not None else None,
            will_restart=self.will_restart,
        )


def start_process(argv: Sequence[str], log: BinaryIO, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """The container's command in a new session, output to ``log``; it is killed if this thread's process dies."""
    return subprocess.Popen(
        ["setpriv", "--pdeathsig", "KILL", "--", *argv],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )


def signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, sig)


def stop_process(popen: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM the process group, SIGKILL after ``grace``; the exit code as the runtimes report it."""
    signal_group(popen, signal.SIGTERM)
    try:
        code = popen.wait(timeout=grace if grace > 0 else 0.1)
    except subprocess.TimeoutExpired:
        code = None
    signal_group(popen, signal.SIGKILL)  # whatever else is left in the group goes too
    if code is None:
        code = popen.wait(timeout=30)
    return 128 - code if code < 0 else code  # -15 -> 143 as the runtimes report a signal
