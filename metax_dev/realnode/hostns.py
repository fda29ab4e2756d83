"""Each real node's private view of the host: a mount namespace and a PID namespace held open by a small process.

Why this module exists: kubelet hard-codes its device-plugin directory
(``/var/lib/kubelet/device-plugins``) and writes ``/var/log/containers``; containerd's shims and CDI
use ``/run``; device plugins hand out paths under ``/dev``. Two nodes on one machine, and a host that
must be left as it was found, need all of these private per node. So every node runs its processes in
a mount namespace of its own (propagation private, so nothing mounted inside reaches the host) in
which:

* ``/var/lib`` and ``/var/log`` are overlays whose writes land in the node's directory;
* ``/var/lib/kubelet/device-plugins`` and ``/run`` are fresh tmpfs mounts;
* ``/dev`` is an overlay of the host's ``/dev`` (``pts`` and ``shm`` bound back in), so that a fake
  GPU host's ``dev/dri``, ``dev/vfio`` and ``dev/mxcd`` (real character devices made with mknod) can
  appear at ``/dev/dri`` ... exactly where the device plugin says they are;
* the fake host's ``var/lib/kubelet/device-plugins`` is the kubelet's directory, so the gpu-device
  agent (run in this namespace with ``METAX_HOST_ROOT`` = the fake host) finds ``kubelet.sock``; so are its
  ``pod-resources`` and ``plugins_registry`` (the kubelet's are under its ``--root-dir``), and
  ``/var/lib/kubelet/plugins`` is the fake host's, so a DRA driver pod whose host paths are the fake host's
  registers where the kubelet watches and serves where the kubelet dials.

The node also has a PID namespace of its own, whose init (PID 1) is the holder (``pause``, which reaps orphans such
as containerd's shims), with its own ``/proc``: a pod with ``hostPID`` (container-runtime, maca, the driver) sees
the node's processes, ``/proc/1/root`` is the node's root (where its ``/run/containerd/containerd.sock`` is) and
``nsenter --target 1 --mount`` enters the node's mount namespace, as on a node whose init is systemd. (This
machine's own PID 1 cannot be entered at all.) The node's processes enter both namespaces with
``nsenter --mount --pid`` (which forks: the process the caller holds is nsenter, its child the program). When the
holder dies every process of the node dies with it (the kernel kills a PID namespace with its init); when the
holder and everything that entered are gone, the kernel drops the namespaces and every mount in them, so teardown
cannot leave a mount behind on the host.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from metax_core.wire import host
from metax_dev.controlplane import processes
from metax_dev.realnode import errors

#: Where the kubelet looks for device plugins (not configurable, not under --root-dir).
DEVICE_PLUGIN_DIR: Final = host.DEVICE_PLUGINS_DIR
#: Where agents read the kubelet's PodResources socket (the product's host path; the kubelet's is under --root-dir).
POD_RESOURCES_DIR: Final = host.POD_RESOURCES_DIR
#: Where a DRA driver registers (the product's host path; the kubelet watches the one under --root-dir).
PLUGINS_REGISTRY_DIR: Final = host.PLUGINS_REGISTRY_DIR
#: Where a DRA driver serves its socket, at the path it gives the kubelet (`services.dra_driver.config`).
PLUGINS_DIR: Final = host.PLUGINS_DIR
_OVERLAID: Final = ("/var/lib", "/var/log")
_DEV_SUBMOUNTS: Final = ("pts", "shm", "mqueue", "hugepages")


def setup_script(
    ns_dir: Path,
    holder: Path,
    device_root: Path | None,
    pod_resources_dir: Path | None = None,
    binds: Sequence[tuple[Path, str]] = (),
) -> str:
    """The shell script the holder runs inside the new namespace before it execs ``holder``.

    With a ``device_root`` (a fake GPU host) the fake host's device nodes are the node's, the kubelet's
    device-plugin directory is the fake host's, and so is its PodResources directory (``pod_resources_dir``, the
    kubelet's ``--root-dir``/pod-resources), so agents whose host paths are the fake host's (the test-only host
    path prefix) reach this node's kubelet at the paths the product mounts."""
    q = shlex.quote
    save = ns_dir / "devsave"
    lines = ["set -e", f"mkdir -p {q(str(save))}"]
    for target in _OVERLAID:
        stem = target.strip("/").replace("/", "-")
        upper, work = ns_dir / f"{stem}-upper", ns_dir / f"{stem}-work"
        lines += [
            f"mkdir -p {q(str(upper))} {q(str(work))}",
            f"mount -t overlay overlay -o lowerdir={target},upperdir={q(str(upper))},workdir={q(str(work))} {target}",
        ]
    lines += [
        f"mkdir -p {DEVICE_PLUGIN_DIR}",
        f"mount -t tmpfs -o mode=0755 tmpfs {DEVICE_PLUGIN_DIR}",
        "mount -t tmpfs -o mode=0755 tmpfs /run",
        f"mkdir -p {q(str(ns_dir / 'dev-upper'))} {q(str(ns_dir / 'dev-work'))}",
        f"mount --rbind /dev {q(str(save))}",
        f"mount -t overlay overlay -o lowerdir=/dev,upperdir={q(str(ns_dir / 'dev-upper'))},"
        f"workdir={q(str(ns_dir / 'dev-work'))} /dev",
        f"for m in {' '.join(_DEV_SUBMOUNTS)}; do",
        f'  if mountpoint -q {q(str(save))}/"$m"; then',
        f'    mkdir -p /dev/"$m"; mount --rbind {q(str(save))}/"$m" /dev/"$m"',
        "  fi",
        "done",
        f"umount -l {q(str(save))}",
    ]
    if device_root is not None:
        root = q(str(device_root))
        lines += [
            "for d in dri vfio; do",
            f'  if [ -d {root}/dev/"$d" ]; then',
            f'    mkdir -p /dev/"$d"; mount --bind {root}/dev/"$d" /dev/"$d"',
            "  fi",
            "done",
            f"if [ -e {root}/dev/mxcd ]; then",
            f"  touch /dev/mxcd; mount --bind {root}/dev/mxcd /dev/mxcd",
            "fi",
            f"mkdir -p {root}{DEVICE_PLUGIN_DIR}",
            f"mount --bind {DEVICE_PLUGIN_DIR} {root}{DEVICE_PLUGIN_DIR}",
        ]
        if pod_resources_dir is not None:
            source = q(str(pod_resources_dir))
            registry = q(str(pod_resources_dir.parent / "plugins_registry"))
            lines += [
                f"mkdir -p {source} {root}{POD_RESOURCES_DIR}",
                f"mount --bind {source} {root}{POD_RESOURCES_DIR}",
                # a DRA driver pod (R-DRA) registers in the fake host's plugins_registry, which is the kubelet's,
                # and serves in the fake host's plugins/, which the kubelet dials at the product's path
                f"mkdir -p {registry} {root}{PLUGINS_REGISTRY_DIR} {root}{PLUGINS_DIR} {PLUGINS_DIR}",
                f"mount --bind {registry} {root}{PLUGINS_REGISTRY_DIR}",
                f"mount --bind {root}{PLUGINS_DIR} {PLUGINS_DIR}",
            ]
    for bound, target in binds:
        # a runtime host (container-runtime and maca as pods): the fake host's directory is the node's own here.
        # A target under the node's own /var/lib overlay or /run tmpfs is made there; any other must exist on the
        # host already (/etc/containerd: Debian's containerd package), never created on it.
        private = target.startswith(("/var/lib/", "/run/"))
        make = f"mkdir -p {q(target)}" if private else f'echo "{target} is missing on this host" >&2; exit 1'
        lines += [
            f"mkdir -p {q(str(bound))}",
            f"if [ ! -d {q(target)} ]; then {make}; fi",
            f"mount --bind {q(str(bound))} {q(target)}",
        ]
    lines += [f"touch {q(str(ns_dir / 'ready'))}", f"exec {q(str(holder))}"]
    return "\n".join(lines) + "\n"


class MountNamespace:
    """The node's mount namespace and the process that holds it open."""

    def __init__(
        self,
        ns_dir: Path,
        holder: Path,
        log_path: Path,
        *,
        device_root: Path | None = None,
        pod_resources_dir: Path | None = None,
        join_cgroups: Sequence[Path] = (),
        binds: Sequence[tuple[Path, str]] = (),
    ) -> None:
        self.ns_dir = ns_dir
        self.binds = list(binds)
        self.holder = holder
        self.device_root = device_root
        self.pod_resources_dir = pod_resources_dir
        self.join_cgroups = list(join_cgroups)
        """Every cgroup each process of the node joins first (its tracking cgroup; an air-gapped node's v2 group)."""
        command = [
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",  # the node's init dies with the holder, and the whole node with its init
            "--mount-proc",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            str(ns_dir / "setup.sh"),
        ]
        self.process = processes.Process("mount-namespace", self.wrap(command, enter=False), log_path)

    def wrap(self, command: list[str], *, enter: bool = True) -> list[str]:
        """``command`` run in the node's cgroups and (``enter``) its mount and PID namespaces."""
        if enter:
            command = [
                "nsenter",
                f"--mount=/proc/{self.pid}/ns/mnt",
                f"--pid=/proc/{self.pid}/ns/pid_for_children",
                "--",
                *command,
            ]
        if not self.join_cgroups:
            return command
        join = 'while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"'
        procs = [str(c / "cgroup.procs") for c in self.join_cgroups]
        return ["/bin/sh", "-c", join, "join", *procs, "--", *command]

    @property
    def pid(self) -> int:
        """The holder's ``unshare`` (in this machine's PID namespace; it is in the node's mount namespace, and its
        ``pid_for_children`` is the node's PID namespace)."""
        popen = self.process.popen
        if popen is None:
            raise errors.NodeError("the node's mount namespace is not running")
        return popen.pid

    def path(self, inside: str) -> Path:
        """A path of the node's own view (its ``/run``, its ``/proc``) as this process opens it."""
        return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")

    def inner_pid(self, pid: int) -> int:
        """The program behind ``pid``, a process `wrap` started (``nsenter``, which forked it into the node's PID
        namespace), in this machine's PID namespace; ``pid`` itself when it has no child (yet)."""
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        return int(children[0]) if children else pid

    def start(self, timeout: float = 20.0) -> None:
        """Write the setup script, start the holder, wait until every mount is in place."""
        self.ns_dir.mkdir(parents=True, exist_ok=True)
        (self.ns_dir / "setup.sh").write_text(
            setup_script(self.ns_dir, self.holder, self.device_root, self.pod_resources_dir, self.binds)
        )
        self.process.start()
        processes.wait_for(
            (self.ns_dir / "ready").is_file,
            "the node's mount namespace",
            processes={"mount-namespace": self.process},
            log_path=self.process.log_path,
            timeout=timeout,
            interval=0.02,
        )

    def stop(self) -> None:
        self.process.stop(timeout=10)
