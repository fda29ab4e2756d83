"""A node of the corpus (tests/data/runtime_corpus) with its real containerd running on its own files.

A case's files sit at their node paths (``/etc/containerd/config.toml``, ``/etc/k0s/containerd.toml``,
``/run/k0s/…``, ``/usr/share/containerd/…``) and name others there (imports, ``root``, ``state``, sockets, the
``opt`` plugin's ``/opt/containerd``). So the daemon runs in a mount namespace of its own
(`metax_dev.containerd_host.Namespace`, held open by a ``sleep`` process), where:

* ``/etc``, ``/usr``, ``/var/lib`` and ``/opt`` are overlays on the machine's with empty upper layers in the
  test's directory (the daemon's writes and the mount points below land there, never on the host);
* ``/run`` is a fresh tmpfs, and the daemon's ``root`` (read from the case's own ``config dump``) another, so its
  overlayfs snapshotter works;
* each directory of the case's files is bound from the agent's host root (``<dir>/root``), where the test's agent
  reads and writes them: the agent and the daemon see the same files;
* the daemon's socket is reached from the test as ``/proc/<holder>/root/<address>``, and from the agent's host
  root through a symlink at the address.

The agent's dry run (``containerd config dump``) runs in the daemon's mount namespace because the daemon lives in
another one (`metax_hw.container_runtime.HostProgram`). The daemon is started and restarted by the harness's
`Supervisor` inside the held namespace.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import stat
import subprocess
from typing import Any

import tomlkit

from metax_dev import containerd_host
from metax_dev.containerd_host import Supervisor
from metax_hw import container_runtime, cri_calls, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config
from tests.support import runtime_corpus

OVERLAID = ("/etc", "/usr", "/var/lib", "/opt")


def _tops(paths: list[str]) -> list[str]:
    """The directories of ``paths``, without those inside another of them."""
    dirs = sorted({os.path.dirname(p) for p in paths})
    return [d for d in dirs if not any(d != o and d.startswith(o + "/") for o in dirs)]


class CorpusNode:
    def __init__(self, case: runtime_corpus.Case, base: pathlib.Path, binary: pathlib.Path, bin_path: str) -> None:
        self.case = case
        self.base = base
        self.binary = binary
        self.root = base / "root"
        """The agent's host root: the case's files at their node paths (bound into the daemon's namespace)."""
        self.placed = case.install(self.root)
        self.namespace = containerd_host.Namespace()
        self.env = {"PATH": f"{bin_path}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.supervisor: Supervisor | None = None
        self.address = ""

    # -- the namespace -----------------------------------------------------------------------------------------

    def _setup(self) -> str:
        q = shlex.quote
        lines = []
        for top in OVERLAID:
            name = top.strip("/").replace("/", "-")
            upper, work = self.base / "ns" / f"{name}-upper", self.base / "ns" / f"{name}-work"
            upper.mkdir(parents=True)
            work.mkdir(parents=True)
            lines.append(
                f"mount -t overlay overlay -o lowerdir={top},upperdir={q(str(upper))},workdir={q(str(work))} {top}"
            )
        dirs = _tops([*self.placed, self.case.root])
        for d in dirs:
            (self.root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
            lines += [f"mkdir -p {q(d)}", f"mount --bind {q(str(self.root / d.lstrip('/')))} {q(d)}"]
        return "\n".join(lines)

    def enter(self, argv: list[str]) -> list[str]:
        return self.namespace.enter(argv)

    def dump(self) -> str:
        """``containerd config dump`` of the node's files as they are now, with the daemon's own binary."""
        done = subprocess.run(
            self.enter([str(self.binary), "--config", self.case.root, "config", "dump"]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=self.env,
        )
        assert done.returncode == 0, f"{self.case.id}: config dump failed: {done.stderr[-2000:]}"
        return done.stdout

    def start(self) -> None:
        (self.base / "ns").mkdir(parents=True)
        self.namespace = containerd_host.Namespace(self._setup())
        self.namespace.start()
        effective: dict[str, Any] = tomlkit.parse(self.dump()).unwrap()
        state_root = str(effective.get("root") or "/var/lib/containerd")
        server = (effective.get("plugins") or {}).get("io.containerd.server.v1.grpc") or {}  # version 4 (2.3+) dumps
        address = (effective.get("grpc") or {}).get("address") or server.get("address")
        self.address = str(address or "/run/containerd/containerd.sock")
        prepare = f"mkdir -p {shlex.quote(state_root)} && mount -t tmpfs tmpfs {shlex.quote(state_root)}"
        subprocess.run(self.enter(["/bin/sh", "-c", prepare]), check=True, capture_output=True, timeout=20)
        link = self.root / self.address.lstrip("/")  # the agent's host root reaches the socket through it
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(self.socket)
        self.supervisor = Supervisor(
            self.binary, pathlib.Path(self.case.root), self.base / "containerd.log", self.env, namespace=self.namespace
        )
        self.supervisor.start()
        self.wait_serving()

    @property
    def socket(self) -> pathlib.Path:
        assert self.namespace.holder is not None
        return pathlib.Path(f"/proc/{self.namespace.holder.pid}/root") / self.address.lstrip("/")

    def wait_serving(self, timeout: float = 30.0) -> None:
        containerd_host.wait_serving(self.socket, self.base / "containerd.log", f"{self.case.id}: containerd", timeout)

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        self.namespace.stop()

    # -- the agent -------------------------------------------------------------------------------------------

    def agent(self, k8s: inmemory.InMemoryCluster) -> agent.ContainerRuntime:
        """The container-runtime agent for this node: host root `root`, the daemon's binary, the stand-in wrapper."""
        wrapper = self.base / "image" / "metax-container-runtime"
        if not wrapper.exists():
            wrapper.parent.mkdir(parents=True)
            containerd_host.stand_in_wrapper(wrapper, pathlib.Path("/usr/sbin/runc"), self.base / "calls")
        settings = config.from_env(
            {},
            node_name=containerd_host.NODE,
            host_root=self.root,
            runtime="containerd",
            containerd_config=self.case.root,
            containerd_binary=str(self.binary),
            runtime_socket=self.address,
            host_namespaces=False,
            wrapper_source=str(wrapper),
            interval=0.0,
            restart_wait=30.0,
        )
        assert self.supervisor is not None
        return bootstrap.bootstrap(
            settings,
            hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), self.supervisor),
            ports=cluster.in_memory(k8s, "container-runtime", containerd_host.NODE),
            board=hostfiles.FileReadinessBoard(self.base / "board"),
        )

    def signal(self) -> Any:
        return hostfiles.FileReadinessBoard(self.base / "board").read_all().get("container-runtime")

    def handlers(self) -> set[str]:
        return set(cri_calls.cri_status_config(str(self.socket))["containerd"]["runtimes"])

    # -- what the test compares ------------------------------------------------------------------------------

    def files(self) -> dict[str, tuple[bytes, int]]:
        """Every file under the agent's host root but the socket link: its bytes and mode."""
        out = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(self.root))] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
        return out
