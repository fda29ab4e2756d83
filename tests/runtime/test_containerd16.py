"""R-MACA on Debian's containerd 1.6 (config version 2, no CDI): a container started through the wrapper with
ctr gets the SDK its prefix chose AND its MetaX devices, which on 1.6 only the edit can inject (from the node's
CDI spec, for the devices its CDI annotation names).

containerd 1.6 runs with its own root, state and socket (CRI off: ctr is the client), the shim runs the wrapper
as the runtime binary (``--runc-binary``, what a ``metax`` handler's ``BinaryName`` does), the wrapper finds the
harness's runc and the edit socket in its ``.conf``. The SDK versions are installed by the real maca agent
(tests/runtime/conftest.py); the device nodes are real character devices (the numbers of /dev/null) made here.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from metax_core.node import cdi
from metax_dev import containerd_host
from metax_dev.realnode import images

from .conftest import RuntimeHost

pytestmark = pytest.mark.realnode  # the harness's runc, root, namespaces (deselect with -m 'not realnode')

CONTAINERD = pathlib.Path("/usr/bin/containerd")
CTR = pathlib.Path("/usr/bin/ctr")
NS = "metax-test"
DEVICE = containerd_host.GPU_DEVICE


class Containerd16:
    """Debian's containerd 1.6 under the harness's service manager (`metax_dev.containerd_host.Supervisor`): in
    a private mount namespace with its own ``/run``, so its runc state and FIFOs never reach the host's ``/run``
    (ctr runs in the same namespace)."""

    def __init__(self, base: pathlib.Path) -> None:
        self.base = base
        self.socket = base / "c.sock"
        config = base / "config.toml"
        self.supervisor = containerd_host.Supervisor(
            CONTAINERD, config, base / "containerd.log", {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        )

    def start(self) -> None:
        self.supervisor.config_path.write_text(
            "version = 2\n"
            f'root = "{self.base / "root"}"\n'
            f'state = "{self.base / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.socket}"\n'
            f'[ttrpc]\n  address = "{self.socket}.ttrpc"\n'
            '[metrics]\n  address = ""\n'
        )
        self.supervisor.start()
        deadline = time.monotonic() + 30
        while self.supervisor.pid is None or self.ctr("version").returncode != 0:
            assert self.supervisor.process is not None and self.supervisor.process.poll() is None, (
                self.supervisor.log.read_text()[-2000:]
            )
            assert time.monotonic() < deadline, "containerd 1.6 did not start serving"
            time.sleep(0.1)

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = self.supervisor.enter([str(CTR), "--address", str(self.socket), "-n", NS, *args])
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def stop(self) -> None:
        if self.supervisor.pid is not None:
            for c in self.ctr("containers", "ls", "-q").stdout.split():
                self.ctr("tasks", "kill", "-s", "KILL", c)
                self.ctr("tasks", "delete", "-f", c)
                self.ctr("containers", "delete", c)
        self.supervisor.stop()
        for path in (self.base / "root", self.base / "state"):
            subprocess.run(["umount", "-R", "-q", str(path)], check=False, capture_output=True)


@pytest.fixture
def containerd16(node: RuntimeHost) -> Iterator[Containerd16]:
    if not CONTAINERD.is_file():
        pytest.fail("Debian's containerd 1.6 is missing: install the package containerd (`./run test` does)")
    daemon = Containerd16(pathlib.Path(f"/tmp/c16-{os.getpid()}-{time.monotonic_ns() % 10**6}"))
    daemon.base.mkdir()
    try:
        daemon.start()
        archive = images.write_image(
            daemon.base / "busybox.tar",
            images.BUSYBOX_IMAGE,
            [
                images.Entry("bin/busybox", images.BUSYBOX),
                *(images.Entry(f"bin/{a}", link="busybox") for a in ("sh", "cat", "ls", "stat")),
            ],
            directories=["bin", "dev", "proc", "sys", "tmp"],
        )
        imported = daemon.ctr("images", "import", str(archive))
        assert imported.returncode == 0, imported.stderr
        yield daemon
    finally:
        daemon.stop()
        shutil.rmtree(daemon.base, ignore_errors=True)


def installed_wrapper(node: RuntimeHost) -> pathlib.Path:
    target = node.tmp / "toolkit" / "metax-container-runtime"
    target.parent.mkdir(exist_ok=True)
    shutil.copy2(node.wrapper, target)
    target.with_name(target.name + ".conf").write_text(f"runc={node.runc}\nsocket={node.socket}\n")
    return target


def node_cdi_spec(node: RuntimeHost) -> pathlib.Path:
    """gpu-device's spec for one GPU (`containerd_host.gpu_cdi_spec`) in the node's CDI directory."""
    return containerd_host.gpu_cdi_spec(node.tmp, node.tmp / "cdi")


def test_ctr_run_through_the_wrapper_gets_devices_and_sdk(node: RuntimeHost, containerd16: Containerd16) -> None:
    node_cdi_spec(node)
    wrapper = installed_wrapper(node)
    script = "cat /opt/maca/version; echo PATH=$PATH; stat -c '%n %F %t:%T' /dev/dri/card7 /dev/mxcd"
    done = containerd16.ctr(
        "run", "--rm", "--runc-binary", str(wrapper),
        "--annotation", f"cdi.k8s.io/metax-gpu-device_0={cdi.qualified_name(DEVICE)}",
        "--env", "METAX_MACA_VERSION=maca-2.18",
        images.BUSYBOX_IMAGE,
        "c16-gpu", "sh", "-c", script,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert lines[0] == "2.18.0.3"
    assert lines[1].endswith(":/opt/maca/bin:/opt/maca/mxgpu_llvm/bin")
    major, minor = os.major(os.stat("/dev/null").st_rdev), os.minor(os.stat("/dev/null").st_rdev)
    assert lines[2:] == [
        f"/dev/dri/card7 character special file {major:x}:{minor:x}",
        f"/dev/mxcd character special file {major:x}:{minor:x}",
    ]


def test_ctr_run_with_a_bad_prefix_fails_with_the_message(node: RuntimeHost, containerd16: Containerd16) -> None:
    node_cdi_spec(node)
    done = containerd16.ctr(
        "run", "--rm", "--runc-binary", str(installed_wrapper(node)),
        "--annotation", f"cdi.k8s.io/metax-gpu-device_0={cdi.qualified_name(DEVICE)}",
        "--env", "METAX_MACA_VERSION=maca-3", images.BUSYBOX_IMAGE, "c16-bad", "true",
    )  # fmt: skip
    assert done.returncode != 0
    assert "METAX_MACA_VERSION='maca-3': no installed MXMACA version matches" in done.stderr
