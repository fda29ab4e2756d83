"""A container runtime for the container-runtime agent to configure, run here: containerd as a child process
with its own root, state and sockets, and the harness's service manager for it (docs/container-runtime.md).

`Supervisor` is the stand-in for systemd that the tests and ``benchmarks/container_runtime.py`` use: it runs
containerd as its child in a private mount namespace with its own ``/run`` (the shims' sockets, FIFOs and
runc state never reach the host's), and restarts it by SIGTERM and a new start, as ``systemctl restart``
does (containerd has no reload: SIGHUP stops it). ``fail_starts`` makes the next start(s) exit at once, as a
unit whose daemon does not come up. ``supervise()`` also starts the daemon again whenever it exits, as systemd's
``Restart=always`` in containerd's own unit does: the stand-in for a node where the agent's restart mode
``signal`` stops the daemon and its supervisor brings it back. `RuntimeNode` is one such daemon with its root
file, the agent's settings for it (host root ``/``: every path under its directory; host programs run directly), and an
in-memory cluster with its Node. `stand_in_wrapper` writes the test-only wrapper: a shell script that logs
each call and execs runc, standing in for ``metax-container-runtime`` until the real wrapper lands.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import stat
import subprocess
import threading
import time
from typing import Any, ClassVar

import attrs

from metax_core.errors import HardwareError
from metax_core.node import cdi
from metax_core.wire import host
from metax_hw import container_runtime, cri_calls, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config

NODE = "runtime-node"
DEBIAN_CONTAINERD = pathlib.Path("/usr/bin/containerd")
DEBIAN_RUNC = pathlib.Path("/usr/sbin/runc")


def harness_bin() -> pathlib.Path:
    from metax_dev.controlplane import build

    return build.build(quiet=True).bin_dir


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def wait_gone(pids: list[int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while any(container_runtime.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


class Namespace:
    """A private mount namespace with its own ``/run`` (a tmpfs), held by a sleeping process until `stop`; ``setup``:
    more shell lines run in it first (mounts a node's files need)."""

    def __init__(self, setup: str = "") -> None:
        self.holder: subprocess.Popen[bytes] | None = None
        self.setup = setup

    def start(self) -> None:
        more = f"{self.setup.strip()}\n" if self.setup.strip() else ""
        setup = f"set -e\nmount -t tmpfs -o mode=0755 tmpfs /run\n{more}echo ready\nexec sleep infinity\n"
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.holder.stdout is not None
        if self.holder.stdout.readline() != b"ready\n":
            self.holder.wait()
            error = self.holder.stderr.read().decode(errors="replace") if self.holder.stderr else ""
            raise RuntimeError(f"the node's mount namespace did not come up (exit {self.holder.returncode}): {error}")

    @property
    def path(self) -> str:
        assert self.holder is not None, "the namespace is not started"
        return f"/proc/{self.holder.pid}/ns/mnt"

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` run in the namespace (nsenter execs it: the PID is the program's)."""
        return ["nsenter", f"--mount={self.path}", "--", *argv]

    def members(self) -> list[int]:
        """Every process in the namespace but its holder."""
        if self.holder is None:
            return []
        ours = _mount_namespace(self.holder.pid)
        return [p for p in _pids() if p != self.holder.pid and ours is not None and _mount_namespace(p) == ours]

    def stop(self) -> None:
        """Kill what still runs in it, then its holder: the namespace and every mount in it go."""
        if self.holder is None:
            return
        left = self.members()
        kill_all(left)
        wait_gone(left)
        self.holder.kill()
        self.holder.wait()
        for stream in (self.holder.stdout, self.holder.stderr):
            if stream is not None:
                stream.close()
        self.holder = None


class Supervisor:
    """The test harness's service manager: containerd as its child, restarted by stop + start."""

    def __init__(
        self,
        binary: pathlib.Path,
        config_path: pathlib.Path,
        log: pathlib.Path,
        env: dict[str, str],
        *,
        args: list[str] | None = None,
        binds: tuple[tuple[pathlib.Path, str], ...] = (),
        namespace: Namespace | None = None,
    ) -> None:
        self.binary = binary
        self.config_path = config_path
        self.log = log
        self.env = env
        self.args = ["--config", str(config_path)] if args is None else args
        """The daemon's arguments (containerd: ``--config <root file>``)."""
        self.binds = binds
        """Directories bound over host paths inside the namespace (dockerd writes /etc/docker/key.json)."""
        self.namespace = namespace
        """A process whose mount namespace the daemon starts in (prepared by the caller, held open by that process);
        None: each start makes its own, with its own ``/run`` and `binds`."""
        self.process: subprocess.Popen[bytes] | None = None
        self.fail_starts = 0
        self.restarts = 0
        self.exits = 0
        """How many times the daemon exited by itself and was started again (`supervise`)."""
        self._watch: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"test supervisor of {self.binary}"

    def start(self) -> None:
        # A private mount namespace with its own /run: the shims' sockets, FIFOs and runc state that containerd
        # keeps under /run/containerd never reach the host's /run (unshare execs, so the PID is containerd's).
        if self.namespace is not None:
            argv = self.namespace.enter([str(self.binary), *self.args])
        else:
            binds = "".join(f"mount --bind {source} {target} && " for source, target in self.binds)
            setup = f'mount -t tmpfs -o mode=0755 tmpfs /run && {binds}exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup, "sh"]
            argv += [str(self.binary), *self.args]
        if self.fail_starts:
            self.fail_starts -= 1
            argv.append("--no-such-flag")  # the daemon exits at once: a unit that does not come up
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)

    def supervise(self, delay: float = 0.5) -> None:
        """Start the daemon again ``delay`` seconds after it exits by itself (not after `stop`)."""

        def watch() -> None:
            while True:
                with self._lock:
                    process = self.process
                if process is None:
                    return
                process.wait()
                time.sleep(delay)
                with self._lock:
                    if self.process is not process:  # stopped or restarted by the harness meanwhile
                        continue
                    self.exits += 1
                    self.start()

        self._watch = threading.Thread(target=watch, name=f"supervise {self.binary.name}", daemon=True)
        self._watch.start()

    def stop(self) -> None:
        with self._lock:
            self._stop()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join(10)
            self._watch = None

    def _stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self, unit: str = "containerd") -> None:
        self.restarts += 1
        with self._lock:
            self._stop()
            self.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` in the daemon's mount namespace (ctr's FIFOs live in its /run)."""
        return ["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", "--", *argv]


GPU_DEVICE = "0000-09-00.0"
"""The one GPU of `gpu_cdi_spec`, as gpu-device names a device in its CDI spec."""


def gpu_cdi_spec(device_root: pathlib.Path, cdi_dir: pathlib.Path) -> pathlib.Path:
    """gpu-device's CDI spec for one GPU (`GPU_DEVICE`) in ``cdi_dir``; its device nodes real character devices (the
    numbers of /dev/null) under ``device_root``. Returns the spec's path."""
    null = os.stat("/dev/null").st_rdev
    nodes = {f"{host.DRI_DIR}/card7": device_root / "dev/dri/card7", host.MXCD: device_root / "dev/mxcd"}
    for made in nodes.values():
        made.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(made, stat.S_IFCHR | 0o666, null)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": cdi.KIND,
        "devices": [
            {
                "name": GPU_DEVICE,
                "containerEdits": {"deviceNodes": [{"path": p, "hostPath": str(h)} for p, h in nodes.items()]},
            }
        ],
    }
    path = cdi_dir / cdi.spec_file_name()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec))
    return path


def stand_in_wrapper(path: pathlib.Path, runc: pathlib.Path, calls: pathlib.Path) -> None:
    path.write_text(
        "#!/bin/sh\n"
        "# TEST-ONLY stand-in for metax-container-runtime: logs the call, then runs runc unchanged.\n"
        f'echo "$@" >> {calls}\n'
        f'exec {runc} "$@"\n'
    )
    path.chmod(0o755)


def wait_serving(socket: pathlib.Path, log: pathlib.Path, what: str, timeout: float = 30.0) -> None:
    """Until the CRI runtime on ``socket`` answers ``Status``; an AssertionError naming ``what``, with ``log``'s tail,
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cri_calls.cri_status_config(str(socket), timeout=2)
            return
        except HardwareError as exc:
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise AssertionError(f"{what} does not serve: {exc}\n{tail}") from None
        time.sleep(0.1)


@attrs.define
class AgentHost:
    """A runtime's host under ``base`` as the container-runtime agent's tests see it: the daemon under a
    `Supervisor`, the in-memory cluster, the files the agent installs and keeps (the wrapper from its "image", the
    toolkit, its state), the agent built for them, its readiness and Events. `RuntimeNode` (containerd) and
    `metax_dev.crio_host.CrioFiles` (CRI-O, real and fake) add the runtime's own files and settings."""

    base: pathlib.Path
    supervisor: Supervisor
    k8s: inmemory.InMemoryCluster

    NODE: ClassVar[str] = NODE
    RESTART_WAIT: ClassVar[float] = 30.0
    """Seconds the agent waits for the restarted daemon."""

    @property
    def wrapper_source(self) -> pathlib.Path:
        return self.base / "image" / "metax-container-runtime"

    @property
    def toolkit(self) -> pathlib.Path:
        return self.base / "var" / "lib" / "metax" / "toolkit"

    @property
    def state_dir(self) -> pathlib.Path:
        return self.base / "var" / "lib" / "metax" / "container-runtime"

    @property
    def calls(self) -> pathlib.Path:
        """The stand-in wrapper's log of its calls."""
        return self.base / "wrapper-calls"

    def runtime_settings(self) -> dict[str, Any]:
        """The settings that name the runtime and its files (the subclass's)."""
        raise NotImplementedError

    def settings(self, **extra: Any) -> config.Settings:
        """The agent's settings for this node; ``extra`` overrides any (``wrapper_source``, ``restart_wait``, …)."""
        values: dict[str, Any] = {
            "node_name": self.NODE,
            "host_root": pathlib.Path("/"),
            "host_namespaces": False,
            "wrapper_source": str(self.wrapper_source),
            "toolkit_dir": str(self.toolkit),
            "state_dir": str(self.state_dir),
            "interval": 0.0,
            "restart_wait": self.RESTART_WAIT,
            **self.runtime_settings(),
        }
        return config.from_env({}, **(values | extra))

    def agent(self, **extra: Any) -> agent.ContainerRuntime:
        return bootstrap.bootstrap(
            self.settings(**extra),
            hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), self.supervisor),
            ports=cluster.in_memory(self.k8s, "container-runtime", self.NODE),
            board=self.board(),
        )

    def board(self) -> hostfiles.FileReadinessBoard:
        return hostfiles.FileReadinessBoard(self.base / "board")

    def signal(self) -> Any:
        return self.board().read_all().get("container-runtime")

    def reasons(self) -> list[str]:
        return sorted(e.get("reason", "") for e in self.k8s.objects.list("events.k8s.io/v1", "Event", "default").items)

    def tree(self) -> dict[str, bytes]:
        """Every file and directory the agent may touch (the configuration, the toolkit, its state): a file's bytes,
        a directory as ``b"<dir>"``."""
        out = {}
        for top in (self.base / "etc", self.base / "var"):
            for p in sorted(top.rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(self.base))] = p.read_bytes()
                elif p.is_dir():
                    out[str(p.relative_to(self.base))] = b"<dir>"
        return out

    def log_tail(self) -> str:
        return self.supervisor.log.read_text(errors="replace")[-3000:] if self.supervisor.log.exists() else ""


@attrs.define
class RuntimeNode(AgentHost):
    binary: pathlib.Path = attrs.field(kw_only=True)
    runc: pathlib.Path = attrs.field(kw_only=True)

    @property
    def root_config(self) -> pathlib.Path:
        return self.base / "etc" / "containerd" / "config.toml"

    @property
    def socket(self) -> pathlib.Path:
        return self.base / "containerd.sock"

    def daemon_paths(self, version: int = 2) -> str:
        """The TOML lines that keep the daemon's own paths in the test directory (part of the root file).

        Version 4 moved the listeners into server plugins (a top-level ``[grpc]`` is ignored there)."""
        b = self.base
        head = f'root = "{b}/root"\nstate = "{b}/state"\n\n'
        opt = f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{b}/opt"\n'
        if version == 4:
            return head + (
                f"[plugins.'io.containerd.server.v1.grpc']\n  address = \"{self.socket}\"\n"
                f"[plugins.'io.containerd.server.v1.ttrpc']\n  address = \"{self.socket}.ttrpc\"\n"
                f"[plugins.'io.containerd.server.v1.metrics']\n  address = \"\"\n"
                f"[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n" + opt
            )
        return head + (
            f'[grpc]\n  address = "{self.socket}"\n'
            f'[ttrpc]\n  address = "{self.socket}.ttrpc"\n[metrics]\n  address = ""\n' + opt
        )

    def runtime_settings(self) -> dict[str, Any]:
        return {
            "runtime": "containerd",
            "containerd_config": str(self.root_config),
            "containerd_binary": str(self.binary),
            "runtime_socket": str(self.socket),
        }

    def start(self) -> None:
        self.supervisor.start()
        self.wait_serving()

    def wait_serving(self, timeout: float = 30.0) -> None:
        wait_serving(self.socket, self.supervisor.log, "containerd", timeout)

    def handlers(self) -> dict[str, Any]:
        loaded = cri_calls.cri_status_config(str(self.socket))
        return dict(loaded["containerd"]["runtimes"])

    def without_wrapper(self) -> dict[str, bytes]:
        """`tree` without the installed wrapper, its ``.conf`` and their directory (removed by the agent's
        uninstall step)."""
        tree = self.tree()
        tree.pop("var/lib/metax/toolkit/metax-container-runtime", None)
        tree.pop("var/lib/metax/toolkit/metax-container-runtime.conf", None)
        tree.pop("var/lib/metax/toolkit", None)
        return tree


DEBIAN_DOCKERD = pathlib.Path("/usr/sbin/dockerd")


def docker_supervisor(base: pathlib.Path, dockerd: pathlib.Path = DEBIAN_DOCKERD) -> Supervisor:
    """dockerd with its own data root, exec root, socket and ``/etc/docker`` (``base/etc/docker`` bound over it in
    its namespace, so ``/etc/docker/daemon.json`` is its usual path); no iptables, no bridge, the vfs driver."""
    etc = base / "etc" / "docker"
    etc.mkdir(parents=True, exist_ok=True)
    args = [
        "--config-file", host.DOCKER_CONFIG, "--data-root", str(base / "data"), "--exec-root",
        str(base / "exec"), "--pidfile", str(base / "docker.pid"), "-H", f"unix://{base / 'docker.sock'}",
        "--iptables=false", "--ip-masq=false", "--bridge=none", "--storage-driver=vfs",
    ]  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return Supervisor(
        dockerd, etc / "daemon.json", base / "dockerd.log", env, args=args, binds=((etc, host.DOCKER_CONFIG_DIR),)
    )


def make(base: pathlib.Path, binary: pathlib.Path, runc: pathlib.Path, bin_path: str) -> RuntimeNode:
    """A node directory with the stand-in wrapper in its "image"; the daemon is not started yet."""
    (base / "image").mkdir(parents=True)
    (base / "etc" / "containerd").mkdir(parents=True)
    (base / "var" / "lib" / "metax").mkdir(parents=True)  # the DaemonSet's host path (shared by the agents)
    env = {"PATH": f"{bin_path}:/usr/sbin:/usr/bin:/sbin:/bin"}
    supervisor = Supervisor(binary, base / "etc" / "containerd" / "config.toml", base / "containerd.log", env)
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
    node = RuntimeNode(base, supervisor, k8s, binary=binary, runc=runc)
    stand_in_wrapper(node.wrapper_source, runc, node.calls)
    return node
