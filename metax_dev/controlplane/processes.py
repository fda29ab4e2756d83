"""The control plane's child processes: start, watch, stop, read their logs, reap what is left.

Why this module exists: no component may outlive the Python process that started it, and when
one fails the error must say why. Each component runs in its own session/process group, so
stopping it signals the whole group; on Linux the kernel also kills it when its starting thread
dies (``PR_SET_PDEATHSIG``), and whatever registered with :func:`stop_at_exit` is stopped when
the interpreter exits. Output goes to a log file per component, whose tail goes into every
error. Work dirs carry the launcher's pid, so the next launch removes the ones a killed launcher
left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from metax_dev.controlplane import errors

logger = logging.getLogger(__name__)

#: Prefix of every control plane's work dir (in the temp dir unless told otherwise).
WORKDIR_PREFIX: Final = "metax-controlplane-"
#: File in a work dir holding the pid of the launcher that owns it.
OWNER_FILE: Final = "owner.pid"
KEEP_HINT: Final = " (METAX_CONTROLPLANE_KEEP=1 keeps all logs after stop)"

_PR_SET_PDEATHSIG: Final = 1


class Stoppable(Protocol):
    """Anything that stops what it started (a control plane)."""

    def stop(self) -> None: ...


_live: set[Stoppable] = set()
_live_lock = threading.Lock()


def stop_at_exit(owner: Stoppable) -> None:
    """Have ``owner.stop()`` called when the interpreter exits (unless forgotten before)."""
    with _live_lock:
        _live.add(owner)


def forget_at_exit(owner: Stoppable) -> None:
    with _live_lock:
        _live.discard(owner)


def _stop_all_live() -> None:
    with _live_lock:
        owners = list(_live)
    for owner in owners:
        with contextlib.suppress(Exception):
            owner.stop()


atexit.register(_stop_all_live)


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log file (at most its last 64 KiB), or why it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL the child when the thread that started it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Process:
    """One control-plane process: its own session/process group and a log file."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        on_main_thread = threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            log.write(f"==> {time.strftime('%H:%M:%S')} {' '.join(self.args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # PDEATHSIG follows the starting *thread*: only safe from the main thread.
                preexec_fn=_die_with_parent if on_main_thread and sys.platform == "linux" else None,  # noqa: PLW1509
            )
        logger.debug("started %s (pid %d)", self.name, self.popen.pid)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def wait_stopped(self, timeout: float) -> None:
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %.0fs after SIGTERM; killing it", self.name, timeout)
            self._signal_group(signal.SIGKILL)
            self.popen.wait(timeout=30)
        # Anything the process left in its group goes too.
        self._signal_group(signal.SIGKILL)
        self.popen = None

    def stop(self, timeout: float = 15.0) -> None:
        self.terminate()
        self.wait_stopped(timeout)

    def tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)


def wait_for(
    predicate: Callable[[], bool],
    what: str,
    *,
    processes: Mapping[str, Process],
    log_path: Path,
    timeout: float,
    interval: float,
) -> None:
    """Poll ``predicate`` until true; fail if any of ``processes`` dies or on timeout.

    The error carries the last lines of the dead process's log, or on timeout of ``log_path``
    (the log of the component being waited for).
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        for name, process in processes.items():
            if not process.alive():
                raise errors.ControlPlaneError(
                    f"{name} exited with code {process.exit_code()} while waiting for {what}; "
                    f"last lines of {process.log_path.name}{KEEP_HINT}:\n{process.tail()}"
                )
        try:
            if predicate():
                return
            last_error = None
        except (OSError, http.client.HTTPException, errors.ControlPlaneError, ValueError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise errors.ControlPlaneError(
                f"timed out after {timeout:.0f}s "
                f"waiting for {what}{detail}; "
                f"last lines of {log_path.name}{KEEP_HINT}:\n{tail(log_path)}"
            )
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed launcher may linger as a zombie until its parent reaps it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def reap_stale_workdirs(parent: Path) -> None:
    """Remove work dirs left by a launcher that was killed (its processes died with it)."""
    for directory in parent.glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # kept on purpose, being created, or not ours
        if owner != os.getpid() and not pid_alive(owner):
            logger.info("removing stale control-plane workdir %s (pid %d is gone)", directory, owner)
            shutil.rmtree(directory, ignore_errors=True)


def new_workdir(parent: Path) -> Path:
    """A fresh work dir owned by this process, after reaping the ones nobody owns any more."""
    reap_stale_workdirs(parent)
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=parent))
    (workdir / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return workdir


def remove_workdir(workdir: Path, *, keep: bool) -> None:
    """Remove a work dir, or with ``keep`` disown it so that it is never reaped."""
    if not workdir.exists():
        return
    if keep:
        with contextlib.suppress(OSError):
            (workdir / OWNER_FILE).unlink()
        logger.info("control plane stopped; kept %s", workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
