"""Real containerd daemons for the container-runtime agent: Debian's 1.6 and the harness's 2.4.

Each test gets a `metax_dev.containerd_host.RuntimeNode` (its docstring: the daemon in its own mount
namespace, the harness's service manager `Supervisor`, the test-only stand-in wrapper), not started: the
test writes the root file and starts it.

Debian's containerd comes from the ``containerd`` package (``./run``'s DEBIAN_PACKAGES); it is installed
without starting a daemon (no systemd here; ``policy-rc.d`` refuses service starts), and these tests never use
its default paths. The 2.4 binaries are the real node's (`metax_dev.controlplane.build`).

And a real CRI-O: ``crio`` gets a `metax_dev.crio_host.CrioNode` (its docstring: CRI-O in the node's own mount
namespace under the same service manager, what this machine needs), its namespace up, CRI-O not started. CRI-O is
built from its Go module (`metax_dev.controlplane.build.build_crio`, cached; a cold build takes minutes): right
after collection when a selected test uses ``crio``, outside any test's timeout, with the main binary set (runc,
pause) it needs too. ``fake_crio`` gets a `FakeCrioNode`: the test-only fake (`fake_crio`), kept for a CRI-O of
another version, its daemon started on the same kind of files."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.runtime import crio as crio_config
from metax_core.runtime import handler
from metax_dev import containerd_host, crio_host
from metax_dev.containerd_host import DEBIAN_CONTAINERD, DEBIAN_RUNC, RuntimeNode, harness_bin
from metax_dev.controlplane import build, errors
from metax_dev.crio_host import CrioNode
from metax_hw import container_runtime, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config

from . import fake_crio as fake

__all__ = ["DEBIAN_CONTAINERD", "CrioNode", "FakeCrioNode", "RuntimeNode", "harness_bin"]

_crio_build: tuple[build.BuildResult, build.BuildResult] | errors.ControlPlaneError | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or find) CRI-O and the main binary set before the first test, when a selected test runs CRI-O."""
    global _crio_build
    if session.config.option.collectonly or not any("crio" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    try:
        _crio_build = (build.build(), build.build_crio())
    except errors.ControlPlaneError as exc:
        _crio_build = exc


@pytest.fixture
def crio(tmp_path: pathlib.Path) -> Iterator[CrioNode]:
    if not isinstance(_crio_build, tuple):
        pytest.fail(f"CRI-O is unavailable: {_crio_build}", pytrace=False)
    if not crio_host.CONMON.is_file():
        pytest.fail("Debian's conmon is missing: ./run installs the 'conmon' package", pytrace=False)
    harness, built = _crio_build
    node = crio_host.make(tmp_path / "n", bin_dir=built.bin_dir, runc=harness.binary("runc"))  # sockets: <108 bytes
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def containerd16(tmp_path: pathlib.Path) -> Iterator[RuntimeNode]:
    if not DEBIAN_CONTAINERD.is_file():
        pytest.fail("Debian's containerd is missing: ./run installs the 'containerd' package", pytrace=False)
    node = containerd_host.make(tmp_path / "node", DEBIAN_CONTAINERD, DEBIAN_RUNC, "/usr/bin")
    try:
        yield node
    finally:
        node.supervisor.stop()
        _cleanup(node)


@pytest.fixture
def containerd24(tmp_path: pathlib.Path) -> Iterator[RuntimeNode]:
    bin_dir = harness_bin()
    node = containerd_host.make(tmp_path / "node", bin_dir / "containerd", bin_dir / "runc", str(bin_dir))
    try:
        yield node
    finally:
        node.supervisor.stop()
        _cleanup(node)


def _cleanup(node: RuntimeNode) -> None:
    """containerd's state holds mounts of the snapshotter only while containers exist; the tests remove theirs."""
    for path in (node.base / "root", node.base / "state"):
        subprocess.run(["umount", "-R", "-q", str(path)], check=False, capture_output=True)
    shutil.rmtree(node.base, ignore_errors=True)
    os.sync()


@attrs.define
class FakeCrioNode:
    """The fake CRI-O (`fake_crio`) as a host's ``crio``: its program (a script running the fake at ``version``), its
    files under ``etc/crio``, its daemon under the harness's `Supervisor` listening on ``crio.sock``."""

    base: pathlib.Path
    supervisor: containerd_host.Supervisor
    k8s: inmemory.InMemoryCluster

    NODE = "fake-crio-node"

    @property
    def etc(self) -> pathlib.Path:
        return self.base / "etc" / "crio"

    @property
    def config(self) -> pathlib.Path:
        return self.etc / "crio.conf"

    @property
    def config_dir(self) -> pathlib.Path:
        return self.etc / "crio.conf.d"

    @property
    def binary(self) -> pathlib.Path:
        return self.base / "bin" / "crio"

    @property
    def socket(self) -> pathlib.Path:
        return self.base / "crio.sock"

    def set_version(self, version: str) -> None:
        self.binary.write_text(f'#!/bin/sh\nFAKE_CRIO_VERSION={version} exec {sys.executable} {fake.__file__} "$@"\n')
        self.binary.chmod(0o755)

    def crio_config(self) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), "--config", str(self.config), "--config-dir", str(self.config_dir), "config"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def running(self, timeout: float = 10.0) -> dict[str, Any]:
        """The running daemon's ``GET /config``, waiting for it to serve."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                text = container_runtime.unix_http_get(str(self.socket), "/config").decode()
                return dict(crio_config.parse(text, "GET /config"))
            except (HardwareError, InvalidSpec):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def agent(self, **extra: Any) -> agent.ContainerRuntime:
        settings = config.from_env(
            {},
            **{
                "node_name": self.NODE,
                "host_root": pathlib.Path("/"),
                "runtime": "crio",
                "crio_config": str(self.config),
                "crio_config_dir": str(self.config_dir),
                "crio_binary": str(self.binary),
                "runtime_socket": str(self.socket),
                "host_namespaces": False,
                "wrapper_source": str(self.base / "image" / handler.WRAPPER_NAME),
                "toolkit_dir": str(self.base / "var" / "lib" / "metax" / "toolkit"),
                "state_dir": str(self.base / "var" / "lib" / "metax" / "container-runtime"),
                "interval": 0.0,
                "restart_wait": 10.0,
                **extra,
            },
        )
        return bootstrap.bootstrap(
            settings,
            hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), self.supervisor),
            ports=cluster.in_memory(self.k8s, "container-runtime", self.NODE),
            board=hostfiles.FileReadinessBoard(self.base / "board"),
        )

    def signal(self) -> Any:
        return hostfiles.FileReadinessBoard(self.base / "board").read_all().get("container-runtime")

    def reasons(self) -> list[str]:
        return sorted(e.get("reason", "") for e in self.k8s.objects.list("events.k8s.io/v1", "Event", "default").items)

    def tree(self) -> dict[str, bytes]:
        out = {}
        for top in (self.base / "etc", self.base / "var"):
            for p in sorted(top.rglob("*")):
                out[str(p.relative_to(self.base))] = p.read_bytes() if p.is_file() else b"<dir>"
        return out


@pytest.fixture
def fake_crio(tmp_path: pathlib.Path) -> Iterator[FakeCrioNode]:
    """The fake's files and program under a fresh directory, its daemon not started."""
    base = tmp_path / "f"  # unix socket paths hold at most 107 bytes
    (base / "bin").mkdir(parents=True)
    (base / "image").mkdir()
    containerd_host.stand_in_wrapper(base / "image" / handler.WRAPPER_NAME, DEBIAN_RUNC, base / "calls")
    (base / "etc" / "crio" / "crio.conf.d").mkdir(parents=True)
    (base / "var" / "lib" / "metax").mkdir(parents=True)  # the DaemonSet's host path (shared by the agents)
    etc = base / "etc" / "crio"
    args = [
        "--config",
        str(etc / "crio.conf"),
        "--config-dir",
        str(etc / "crio.conf.d"),
        "--listen",
        str(base / "crio.sock"),
    ]
    supervisor = containerd_host.Supervisor(
        base / "bin" / "crio", etc / "crio.conf", base / "crio.log", {"PATH": "/usr/bin:/bin"}, args=args
    )
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(FakeCrioNode.NODE)
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
    node = FakeCrioNode(base, supervisor, k8s)
    node.set_version(fake.VERSION)
    try:
        yield node
    finally:
        supervisor.stop()
