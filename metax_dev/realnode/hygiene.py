"""Leaving the host as it was found: sysctls, cgroup directories, and a snapshot to prove it.

Why this module exists: a kubelet and containerd change the machine they run on beyond their own
directories. The kubelet sets ``vm.overcommit_memory=1``, ``kernel.panic=10`` and
``kernel.panic_on_oops=1``; containers get cgroup directories (``/k8s.io/<id>`` in every hierarchy,
whatever the node); shims outlive containerd. The sysctls are recorded before the first kubelet on
the machine starts and written back after the last one stops (launchers share one record under
``/run/metax-realnode``, so concurrent test sessions do not restore each other's kubelet values);
the launcher tracks each node's own processes in a
cgroup of its own (so teardown can kill whatever is left, shims included), removes the containers'
cgroup directories, and :func:`snapshot` lets a test compare the host before and after.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from metax_core.wire import host
from metax_dev.controlplane import processes

CGROUP_ROOT: Final = Path(host.CGROUP_DIR)
#: Sysctls the kubelet changes (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables).
KUBELET_SYSCTLS: Final = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
#: The containerd namespaces whose containers get ``/<namespace>/<id>`` cgroups.
CONTAINERD_NAMESPACES: Final = ("k8s.io", "default")
#: The cgroup directory under which every node tracks its own processes.
TRACKING_DIR: Final = "metax-realnode"


def read_sysctls(keys: Iterable[str] = KUBELET_SYSCTLS) -> dict[str, str]:
    return {key: (Path("/proc/sys") / key).read_text().strip() for key in keys}


def write_sysctls(values: Mapping[str, str]) -> None:
    for key, value in values.items():
        path = Path("/proc/sys") / key
        if path.read_text().strip() != value:
            path.write_text(value + "\n")


#: Where launchers on this machine share the sysctls recorded before any of their kubelets started.
SHARED_STATE: Final = Path("/run/metax-realnode")


@contextlib.contextmanager
def _shared_record() -> Iterator[dict[str, Any]]:
    SHARED_STATE.mkdir(parents=True, exist_ok=True)
    with (SHARED_STATE / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = SHARED_STATE / "sysctls.json"
        record: dict[str, Any] = {"values": {}, "owners": []}
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
        record["owners"] = [pid for pid in record.get("owners", []) if processes.pid_alive(pid)]
        yield record
        if record["owners"]:
            path.write_text(json.dumps(record) + "\n")
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    if not record["owners"]:
        shutil.rmtree(SHARED_STATE, ignore_errors=True)


def hold_sysctls(owner: int) -> dict[str, str]:
    """Register ``owner`` as a launcher whose kubelets may change the sysctls; returns the values to
    restore. The first holder on the machine records the current values; later ones (while any holder
    lives) share that record, so concurrent launchers never mistake a kubelet's values for the host's."""
    with _shared_record() as record:
        if not record["owners"] or not record.get("values"):
            record["values"] = read_sysctls()
        record["owners"].append(owner)
        values: dict[str, str] = dict(record["values"])
    return values


def release_sysctls(owner: int, fallback: Mapping[str, str]) -> None:
    """``owner``'s kubelets are gone; the last holder writes the recorded values back."""
    with _shared_record() as record:
        values = record.get("values") or dict(fallback)
        if owner in record["owners"]:  # one hold per call: a process may run several launchers
            record["owners"].remove(owner)
        if not record["owners"]:
            write_sysctls(values)


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, and a v2 one if present)."""
    found: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return sorted(set(found))


def tracking_hierarchy() -> Path:
    """The hierarchy whose ``metax-realnode/<node>`` cgroup holds a node's own processes."""
    for candidate in (CGROUP_ROOT / "pids", CGROUP_ROOT / "systemd", CGROUP_ROOT):
        if (candidate / "cgroup.procs").is_file() and candidate in hierarchies():
            return candidate
    raise OSError("no writable cgroup hierarchy found under /sys/fs/cgroup")


def _subdirs(directory: Path) -> list[Path]:
    """``directory`` and every directory below it, deepest first; tolerates concurrent removal
    (runc and the shim remove a container's cgroup when it exits)."""
    found: list[Path] = []
    for parent, dirs, _ in os.walk(directory):
        found += [Path(parent) / d for d in dirs]
    found.sort(key=lambda d: -len(d.parts))
    return [*found, directory]


def cgroup_pids(directory: Path) -> set[int]:
    """Every process in ``directory`` and the cgroups below it."""
    pids: set[int] = set()
    for sub in _subdirs(directory):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in (sub / "cgroup.procs").read_text().split())
    return pids


def remove_cgroup(directory: Path, *, timeout: float = 10.0) -> None:
    """SIGKILL every process in ``directory`` (and below), then remove the directories bottom-up."""
    if not directory.is_dir():
        return
    deadline = time.monotonic() + timeout
    while pids := cgroup_pids(directory):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise OSError(f"processes {sorted(pids)} in {directory} did not die")
        time.sleep(0.05)
    for sub in _subdirs(directory):
        _rmdir(sub, deadline)


def _rmdir(directory: Path, deadline: float) -> None:
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while the kernel finishes tearing down exited tasks
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def remove_container_cgroups(container_ids: Iterable[str], keep_parents: Iterable[Path]) -> None:
    """Kill and remove ``/<namespace>/<id>`` in every hierarchy; then each empty ``/<namespace>``
    directory the launcher did not find there before (``keep_parents``)."""
    ids = list(container_ids)
    keep = set(keep_parents)
    for hierarchy in hierarchies():
        for namespace in CONTAINERD_NAMESPACES:
            parent = hierarchy / namespace
            for container in ids:
                remove_cgroup(parent / container)
            if parent.is_dir() and parent not in keep:
                with contextlib.suppress(OSError):  # busy: another node's containers are there
                    parent.rmdir()


def existing_namespace_cgroups() -> set[Path]:
    return {h / ns for h in hierarchies() for ns in CONTAINERD_NAMESPACES if (h / ns).is_dir()}


@dataclass(frozen=True)
class HostState:
    """What a real node could leave behind on the host, as seen from the host's mount namespace."""

    mounts: frozenset[str]
    processes: frozenset[str]
    sysctls: Mapping[str, str]
    cgroups: frozenset[str]
    paths: frozenset[str]


#: Host paths a node must not create (they exist only inside each node's namespace).
WATCHED_PATHS: Final = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
    "/run/runc",
    host.CDI_DIR,
    "/etc/cni",
    "/opt/cni",
    host.DRI_DIR,
    host.MXCD,
    "/var/lib/containerd",
    str(SHARED_STATE),
)


def snapshot(markers: Iterable[str]) -> HostState:
    """Mount points, processes whose command line mentions one of ``markers``, the kubelet's
    sysctls, cgroup directories two levels deep in every hierarchy, and :data:`WATCHED_PATHS`."""
    mounts = frozenset(
        line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    wanted = [m for m in markers if m]
    procs: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(m in cmdline for m in wanted):
                procs.add(f"{entry.name}: {cmdline.strip()}")
    cgroups: set[str] = set()
    for hierarchy in hierarchies():
        with contextlib.suppress(OSError):
            for first in hierarchy.iterdir():
                if first.is_dir():
                    cgroups.add(str(first))
                    cgroups.update(str(d) for d in first.iterdir() if d.is_dir())
    paths = frozenset(p for p in WATCHED_PATHS if os.path.lexists(p))
    return HostState(mounts, frozenset(procs), read_sysctls(), frozenset(cgroups), paths)
