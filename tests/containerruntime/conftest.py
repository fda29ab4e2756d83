"""Real containerd daemons for the container-runtime agent: Debian's 1.6 and the harness's 2.4.

Each test gets a `metax_dev.containerd_host.RuntimeNode` (its docstring: the daemon in its own mount
namespace, the harness's service manager `Supervisor`, the test-only stand-in wrapper), not started: the
test writes the root file and starts it.

Debian's containerd comes from the ``containerd`` package (``./run``'s DEBIAN_PACKAGES); it is installed
without starting a daemon (no systemd here; ``policy-rc.d`` refuses service starts), and these tests never use
its default paths. The 2.4 binaries are the real node's (`metax_dev.controlplane.build`)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from metax_dev import containerd_host
from metax_dev.containerd_host import DEBIAN_CONTAINERD, DEBIAN_RUNC, RuntimeNode, harness_bin

__all__ = ["DEBIAN_CONTAINERD", "RuntimeNode", "harness_bin"]


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
