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
from collections.abc import Iterator

import attrs
import pytest

from metax_dev import containerd_host, crio_host
from metax_dev.containerd_host import DEBIAN_CONTAINERD, DEBIAN_RUNC, RuntimeNode, harness_bin
from metax_dev.controlplane import build, errors
from metax_dev.crio_host import CrioNode
from metax_k8s.inmemory import cluster as inmemory

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
class FakeCrioNode(crio_host.CrioFiles):
    """The fake CRI-O (`fake_crio`) as a host's ``crio``: its program (a script running the fake at ``version``), its
    files under ``etc/crio``, its daemon under the harness's `Supervisor` listening on ``crio.sock``."""

    NODE = "fake-crio-node"
    RESTART_WAIT = 10.0
    SERVE_TIMEOUT = 10.0

    def set_version(self, version: str) -> None:
        self.binary.write_text(f'#!/bin/sh\nFAKE_CRIO_VERSION={version} exec {sys.executable} {fake.__file__} "$@"\n')
        self.binary.chmod(0o755)


@pytest.fixture
def fake_crio(tmp_path: pathlib.Path) -> Iterator[FakeCrioNode]:
    """The fake's files and program under a fresh directory, its daemon not started."""
    base = tmp_path / "f"  # unix socket paths hold at most 107 bytes
    (base / "bin").mkdir(parents=True)
    (base / "image").mkdir()
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
    containerd_host.stand_in_wrapper(node.wrapper_source, DEBIAN_RUNC, node.calls)
    node.set_version(fake.VERSION)
    try:
        yield node
    finally:
        supervisor.stop()
