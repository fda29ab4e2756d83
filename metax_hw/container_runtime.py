"""The container runtime as the container-runtime agent reaches it (C4): its binary, its CRI socket, its service.

* `HostProgram` runs a program of the **host** (``containerd --version``, ``containerd config dump``,
  ``systemctl``): with ``host_namespaces`` through ``nsenter --target 1 --mount`` (the DaemonSet has hostPID;
  the mount namespace is all these need: the host's binary, its files, systemd's socket), so it is the host's
  own binary with the host's files, found on a usual host PATH; without, directly (tests, a bare host). Every run has a
  deadline and its failure is a `HardwareError` with the program's output.
* `cri_calls.cri_status_config` asks the running daemon what it loaded: the CRI ``RuntimeService/Status`` call with
  ``verbose`` (containerd answers with its CRI config as JSON under ``info["config"]``, runtimes included).
  The two messages are encoded by hand (two fields each) rather than generating the whole CRI API.
* `Dockerd`, `Crio`: the same for Docker (``GET /info``) and CRI-O (``crio config``, ``GET /config``).
* `SystemdService` restarts a unit through the host's systemd. containerd has no reload (SIGHUP stops it).
* `SignalRestart` signals the daemon itself (restart mode ``signal``): the process serving the runtime's socket,
  found by the socket's peer credentials (``SO_PEERCRED``, as NVIDIA's toolkit finds it), checked to be that
  runtime's daemon and never PID 1 (a socket-activated unit's socket is systemd's); its supervisor (systemd's
  ``Restart=always`` in containerd's own unit, runit, daemontools, s6) starts it again. dockerd reloads on SIGHUP
  instead (its ``runtimes`` are reloadable).
* `daemon` finds that process; `Containerd` then runs ``config dump`` and ``--version`` with the daemon's own
  binary in the daemon's own mount namespace (``nsenter --target <pid> --mount``), so a node whose containerd is
  not on the usual PATH (k3s's) is dry-run with what it runs.
"""

from __future__ import annotations

import json
import logging
import os
import signal as signals
import socket as sockets
import struct
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import HardwareError
from metax_hw import cri_calls

log = logging.getLogger(__name__)

NSENTER = "nsenter"
PROC_ROOT = "/proc/1/root"
"""The host's root seen through PID 1 (hostPID): how a pod reaches the runtime's socket without a mount."""
TIMEOUT = 30.0
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MAX = 2000


class HostProgram:
    def __init__(self, *, host_namespaces: bool, timeout: float = TIMEOUT) -> None:
        self.host_namespaces = host_namespaces
        self.timeout = timeout

    def argv(self, argv: Sequence[str], target: int = 1) -> list[str]:
        """``argv`` in the mount namespace of process ``target``: always in host namespaces (the host's: PID 1),
        and otherwise when ``target`` (a runtime daemon) lives in another mount namespace than this process."""
        enter = self.host_namespaces or (target != 1 and not same_mount_namespace(target))
        return [NSENTER, "--target", str(target), "--mount", "--", *argv] if enter else list(argv)

    def run(self, argv: Sequence[str], *, check: bool = True, target: int = 1) -> subprocess.CompletedProcess[str]:
        command = self.argv(argv, target)
        # The host's programs are looked up on a usual host PATH (containerd's tarball puts it in /usr/local/bin);
        # run directly, on this process's own.
        path = HOST_PATH if self.host_namespaces else os.environ.get("PATH", HOST_PATH)
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env={"LC_ALL": "C", "PATH": path},
            )
        except FileNotFoundError as exc:
            raise HardwareError(f"run {argv[0]}", None, f"not found: {exc.filename}") from exc
        except subprocess.TimeoutExpired as exc:
            raise HardwareError(f"run {' '.join(argv)}", None, f"no answer within {self.timeout:.0f}s") from exc
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()[-_MAX:]
            raise HardwareError(f"run {' '.join(argv)}", None, f"exit {done.returncode}: {detail}")
        return done


DAEMONS: Mapping[str, tuple[str, int]] = {
    "containerd": ("containerd", signals.SIGTERM),
    "crio": ("crio", signals.SIGTERM),
    "docker": ("dockerd", signals.SIGHUP),
}
"""Per runtime, its daemon's program name and the signal restart mode ``signal`` sends it: containerd and CRI-O
stop on SIGTERM, leaving their containers running (shims, conmon), and their supervisor starts them again;
dockerd reloads its ``runtimes`` on SIGHUP (a stopped dockerd would stop its containers without live-restore)."""


@attrs.frozen
class Daemon:
    """The process serving a runtime's socket."""

    pid: int
    exe: str
    """Its binary's path in its own mount namespace (`` (deleted)`` stripped: what a restart runs)."""


def peer_pid(socket_path: str, timeout: float = 5.0) -> int:
    """The PID (in this process's PID namespace) of the process that listens on ``socket_path``."""
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
            creds = sock.getsockopt(sockets.SOL_SOCKET, sockets.SO_PEERCRED, struct.calcsize("3i"))
        except OSError as exc:
            raise HardwareError("find the process serving", socket_path, str(exc.strerror or exc)) from exc
    pid, _, _ = struct.unpack("3i", creds)
    return int(pid)


def daemon(socket_path: str, expected: str) -> Daemon:
    """The runtime's daemon serving ``socket_path``, checked to be program ``expected`` (``containerd``, ``crio``,
    ``dockerd``) and not PID 1 (with socket activation the listening socket belongs to systemd)."""
    pid = peer_pid(socket_path)
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError as exc:
        raise HardwareError("read the daemon's binary", f"/proc/{pid}/exe", str(exc.strerror or exc)) from exc
    if pid == 1 or not os.path.basename(exe).startswith(expected):
        raise HardwareError(
            "find the runtime's daemon",
            socket_path,
            f"the process serving it is {exe} (pid {pid}), not {expected}: a socket-activated service? "
            "Restart mode signal needs the daemon itself to serve its socket (use restartMode systemd)",
        )
    return Daemon(pid, exe)


def same_mount_namespace(pid: int) -> bool:
    """Whether process ``pid`` sees the files this process sees (the same mount namespace)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return True  # not to be entered either way: run here


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    return bool(fields) and fields[0] not in ("Z", "X")


class Containerd:
    """The host's containerd: its version, a dry load of a config, and what the running daemon loaded."""

    PROGRAM = "containerd"

    def __init__(self, program: HostProgram, *, binary: str | None, socket: str) -> None:
        self.program = program
        self.binary = binary
        """The host's containerd program; None: the running daemon's own binary (else ``containerd`` on the PATH)."""
        self.socket = socket
        """The CRI socket as this process can open it (under `PROC_ROOT` in a pod)."""

    def _how(self) -> tuple[str, int]:
        """The binary to run (the configured one, else the running daemon's own, else ``containerd``) and the process
        whose mount namespace it runs in (the running daemon's: it sees the files the daemon reads; else PID 1)."""
        try:
            found: Daemon | None = daemon(self.socket, self.PROGRAM)
        except HardwareError:
            found = None
        binary = self.binary or (found.exe if found is not None else self.PROGRAM)
        return binary, found.pid if found is not None else 1

    def version_text(self) -> str:
        binary, target = self._how()
        return self.program.run([binary, "--version"], target=target).stdout

    def dump(self, config: str) -> tuple[bool, str]:
        """``containerd --config <config> config dump``: (loads, the effective config or the error)."""
        binary, target = self._how()
        done = self.program.run([binary, "--config", config, "config", "dump"], check=False, target=target)
        if done.returncode != 0:
            return False, (done.stderr or done.stdout).strip()[-_MAX:]
        return True, done.stdout

    def cri_config(self) -> Mapping[str, Any]:
        return cri_calls.cri_status_config(self.socket)

    def sandboxes(self, runtime_handler: str) -> list[str]:
        return cri_calls.sandboxes_with_handler(self.socket, runtime_handler)


class Dockerd:
    """The host's dockerd: its version, and what the running daemon loaded (``GET /info``)."""

    def __init__(self, program: HostProgram, *, binary: str, socket: str) -> None:
        self.program = program
        self.binary = binary
        self.socket = socket

    def info(self) -> Mapping[str, Any]:
        try:
            loaded = json.loads(cri_calls.unix_http_get(self.socket, "/info"))
        except ValueError as exc:
            raise HardwareError("read dockerd's info", self.socket, f"not JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise HardwareError("read dockerd's info", self.socket, "not an object")
        return loaded

    def validate(self, config: str) -> tuple[bool, str]:
        """``dockerd --validate --config-file <config>`` (Docker 23.0 and later)."""
        done = self.program.run([self.binary, "--validate", "--config-file", config], check=False)
        return done.returncode == 0, (done.stderr or done.stdout).strip()[-_MAX:]


class Crio:
    """The host's CRI-O: a dry load of its configuration (``crio config``) and what the running daemon loaded
    (``GET /config`` on its socket, the TOML ``crio status config`` prints)."""

    def __init__(self, program: HostProgram, *, binary: str, socket: str) -> None:
        self.program = program
        self.binary = binary
        self.socket = socket

    def check(self, config: str, config_dir: str) -> tuple[bool, str]:
        """``crio --config <config> --config-dir <dir> config``: (loads, the effective config or the error)."""
        done = self.program.run([self.binary, "--config", config, "--config-dir", config_dir, "config"], check=False)
        if done.returncode != 0:
            return False, (done.stderr or done.stdout).strip()[-_MAX:]
        return True, done.stdout

    def config(self) -> str:
        try:
            return cri_calls.unix_http_get(self.socket, "/config").decode()
        except UnicodeDecodeError as exc:
            raise HardwareError("read crio's config", self.socket, f"not text: {exc}") from exc

    def sandboxes(self, runtime_handler: str) -> list[str]:
        return cri_calls.crio_sandboxes_with_handler(self.socket, runtime_handler)


class SystemdService:
    """Restart a unit through the host's systemd (``nsenter … systemctl restart <unit>``)."""

    name = "the host's systemd"

    def __init__(self, program: HostProgram) -> None:
        self.program = program

    def restart(self, unit: str) -> None:
        log.info("restarting systemd unit %s", unit)
        self.program.run(["systemctl", "restart", unit])


class SignalRestart:
    """Restart mode ``signal``: the daemon serving ``socket`` gets ``signum``; with ``exits`` (SIGTERM) the call
    returns once that process is gone (its supervisor starts a new one), without (dockerd's SIGHUP reload) at once."""

    def __init__(
        self,
        socket: str,
        expected: str,
        *,
        signum: int = signals.SIGTERM,
        exit_wait: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket = socket
        self.expected = expected
        self.signum = signum
        self.exit_wait = exit_wait
        self.sleep = sleep
        self.clock = clock

    @property
    def name(self) -> str:
        return f"{signals.Signals(self.signum).name} to the {self.expected} serving {self.socket}"

    def restart(self, unit: str) -> None:
        target = daemon(self.socket, self.expected)
        log.info("sending %s to %s (pid %d)", signals.Signals(self.signum).name, target.exe, target.pid)
        try:
            os.kill(target.pid, self.signum)
        except OSError as exc:
            raise HardwareError(f"signal {self.expected}", str(target.pid), str(exc.strerror or exc)) from exc
        if self.signum == signals.SIGHUP:
            return
        deadline = self.clock() + self.exit_wait
        while alive(target.pid):
            if self.clock() >= deadline:
                raise HardwareError(
                    f"restart {self.expected}", str(target.pid), f"still running {self.exit_wait:.0f}s after the signal"
                )
            self.sleep(0.05)
