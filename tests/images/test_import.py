"""The archives import into containerd under the names the kubelet asks for (issue 21, Build 2).

A throwaway containerd (the real node's, built here: docs/realnode.md) with its own root, state and socket
imports every archive with ``ctr -n k8s.io images import`` and lists each image under its fully qualified
reference (``metax-gpu-label:0.1.0`` → ``docker.io/library/metax-gpu-label:0.1.0``) with the digest the build
reported.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metax_dev.controlplane import build as binaries
from metax_dev.images import build


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    bins = binaries.build(quiet=True)
    config = tmp_path / "config.toml"
    socket = tmp_path / "c.sock"
    config.write_text(
        f'version = 3\nroot = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\n'
        f'[grpc]\n  address = "{socket}"\n[ttrpc]\n  address = "{socket}.ttrpc"\n'
    )
    log = (tmp_path / "containerd.log").open("w")
    process = subprocess.Popen(
        [str(bins.binary("containerd")), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert process.poll() is None, (tmp_path / "containerd.log").read_text()
            assert time.monotonic() < deadline, "containerd did not open its socket in 30 s"
            time.sleep(0.2)
        yield bins.binary("ctr"), socket
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_ctr_imports_every_archive_under_the_name_the_kubelet_asks_for(
    built: build.Built, containerd: tuple[Path, Path]
) -> None:
    ctr, socket = containerd
    base = [str(ctr), "--address", str(socket), "-n", "k8s.io", "images"]
    for archive in built.archives.values():
        subprocess.run([*base, "import", str(archive)], check=True, capture_output=True, timeout=300)
    listed = subprocess.run([*base, "ls"], check=True, capture_output=True, text=True).stdout.splitlines()[1:]
    names = {line.split()[0]: line.split()[2] for line in listed if not line.startswith("sha256:")}
    for name, reference in built.references.items():
        assert names.get(build.qualified(reference)) == built.digests[name], (reference, names)
