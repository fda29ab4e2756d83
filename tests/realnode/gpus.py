"""GPU helpers shared by the real-node tests: allocatable counts, what a pod's script printed about its
devices and environment, the fake host's GPUs, and a stand-in for udev on a fake host."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from kubernetes import client

from metax_core.inventory import PciAddress, PciFunction
from metax_hw_fake import host

GPU = "metax-tech.com/gpu"
#: The device numbers the fake hosts' device nodes get: those of /dev/null (harmless when opened).
DEVICE_NUMBERS = (1, 3)

#: A pod script fragment: one ``NODE <path> <type> <major>:<minor>`` line per device node it sees.
LIST_DEVICES = 'for f in /dev/dri/* /dev/vfio/* /dev/mxcd; do [ -e "$f" ] && stat -c \'NODE %n %F %t:%T\' "$f"; done; '


def allocatable(core: client.CoreV1Api, node_name: str, resource: str = GPU) -> int:
    return int((core.read_node(node_name).status.allocatable or {}).get(resource, "0"))


def capacity(core: client.CoreV1Api, node_name: str, resource: str = GPU) -> int:
    return int((core.read_node(node_name).status.capacity or {}).get(resource, "0"))


def device_lines(text: str) -> dict[str, str]:
    """``NODE <path> <type> <major>:<minor>`` lines printed by the pods' scripts."""
    seen = {}
    for line in text.splitlines():
        if line.startswith("NODE "):
            _, path, rest = line.split(" ", 2)
            seen[path] = rest
    return seen


def env_value(text: str, name: str) -> str:
    values = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{name}=")]
    assert values, f"{name} not printed in:\n{text}"
    return values[0]


def functions(fake: host.FakeHost) -> list[PciFunction]:
    """The fake host's functions bound to the GPU driver (PFs, and VFs when SR-IOV is on)."""
    return [f for f in fake.devices.functions() if f.driver == "metax"]


def expected_nodes(fake: host.FakeHost, addresses: list[str]) -> set[str]:
    """The device nodes a container given ``addresses`` must see: theirs under /dev, and /dev/mxcd."""
    nodes = {"/dev/mxcd"}
    for address in addresses:
        nodes |= {p for p in fake.devices.device_nodes(PciAddress(address)) if p.startswith("/dev/")}
    return nodes


def unschedulable(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The scheduler's message when the pod is Unschedulable, else ''."""
    status = core.read_namespaced_pod(name, namespace).status
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
            return str(condition.message)
    return ""


def make_device_nodes_real(root: Path) -> list[Path]:
    """Replace the fake host's device node files by character devices (the numbers of /dev/null)."""
    made = []
    for path in sorted([*(root / "dev/dri").glob("*"), *(root / "dev/vfio").glob("*"), root / "dev/mxcd"]):
        if path.exists() and not path.is_char_device():
            path.unlink()
            os.mknod(path, 0o666 | 0o020000, os.makedev(*DEVICE_NUMBERS))
            made.append(path)
    return made


@contextmanager
def udev(root: Path, interval: float = 0.2) -> Iterator[None]:
    """While the block runs, turn the device nodes the fake kernel creates as plain files (after a driver
    reload, for new VFs) into character devices, as udev does on a real host."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            # the fake kernel may remove or rewrite a node meanwhile: the next pass catches up
            with suppress(OSError):
                make_device_nodes_real(root)

    thread = threading.Thread(target=run, name="udev", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
