"""N real nodes joined to a test control plane, brought up and torn down as one.

Why this module exists: what is shared between a control plane's real nodes lives here, once: the
binaries (from the cached build), the two local images, the host's sysctls (recorded before the
first kubelet starts, written back after the last one stops), the cgroup directories that existed
before (never removed), the work directory (``/tmp/metax-realnode-*``) and the ``atexit`` hook that
tears everything down if the caller does not.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from metax_dev.controlplane import processes
from metax_dev.realnode import airgap, containerd, errors, hygiene, images, node, podnet

if TYPE_CHECKING:
    from metax_dev.controlplane.cluster import ControlPlane

logger = logging.getLogger(__name__)

WORKDIR_PREFIX = "metax-realnode-"


class RealNodes:
    """``count`` real nodes named ``<prefix>-<i>`` on ``control_plane`` (which must be started)."""

    def __init__(
        self,
        control_plane: ControlPlane,
        count: int = 1,
        *,
        prefix: str = "real-node",
        device_roots: Sequence[Path | None] = (),
        keep_workdir: bool | None = None,
        verbosity: int = 1,
    ) -> None:
        self.control_plane = control_plane
        self.count = count
        self.prefix = prefix
        self.device_roots = list(device_roots)
        self.keep_workdir = keep_workdir if keep_workdir is not None else os.environ.get("METAX_REALNODE_KEEP") == "1"
        self.verbosity = verbosity
        self.nodes: list[node.RealNode] = []
        self.workdir: Path | None = None
        self.sysctls: dict[str, str] = {}
        self._cgroup_parents: set[Path] = set()
        self._images: list[Path] = []
        self._tracking_parent: Path | None = None
        self._lock = threading.RLock()
        self.started_seconds: float | None = None
        self.stopped_seconds: float | None = None

    def __enter__(self) -> RealNodes:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def bin_dir(self) -> Path:
        bin_dir = self.control_plane.bin_dir
        if bin_dir is None:
            raise errors.NodeError("the control plane is not started (no bin dir)")
        return bin_dir

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def start(self) -> RealNodes:
        started = time.monotonic()
        with self._lock:
            missing = [
                b
                for b in ("kubelet", "containerd", "ctr", "containerd-shim-runc-v2", "runc", "pause")
                if not (self.bin_dir / b).is_file()
            ]
            if missing:
                raise errors.NodeError(
                    f"{self.bin_dir} has no {', '.join(missing)}: rebuild with `python -m metax_dev.controlplane build`"
                )
            if os.geteuid() != 0:
                raise errors.NodeError(
                    "real nodes need root: mount namespaces, overlay mounts, cgroups and mknod "
                    "(run the tests as root, as CI does)"
                )
            for tool in ("unshare", "nsenter", "mount", "mountpoint", "ip", containerd.SUPERVISE, containerd.SVC):
                if shutil.which(tool) is None:
                    raise errors.NodeError(
                        f"{tool} is not on PATH (Debian: util-linux, mount, iproute2, daemontools; ./run installs them)"
                    )
            for line in reap_stale():
                logger.info("%s", line)
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (self.workdir / processes.OWNER_FILE).write_text(f"{os.getpid()}\n")
            processes.stop_at_exit(self)
            try:
                self._images = images.write_test_images(self.workdir / "images", self.bin_dir / "pause")
                self.sysctls = hygiene.hold_sysctls(os.getpid())
                (self.workdir / "sysctls.json").write_text(json.dumps(self.sysctls) + "\n")
                self._cgroup_parents = hygiene.existing_namespace_cgroups()
                self._tracking_parent = hygiene.tracking_hierarchy() / hygiene.TRACKING_DIR
                for _ in range(self.count):
                    self.add_node()
            except BaseException:
                self.stop()
                raise
        self.started_seconds = time.monotonic() - started
        return self

    def add_node(
        self,
        device_root: Path | None = None,
        images: Sequence[Path] = (),
        *,
        runtime_host: bool = False,
        host_alias: Path | None = None,
        registry_config_dir: Path | None = None,
        airgap_allowed: Sequence[str] | None = None,
    ) -> node.RealNode:
        """One more node (the next ``<prefix>-<i>``), started and Ready; ``images``: more OCI archives its
        containerd imports (the product's, `metax_dev.images`) besides the two test images; ``runtime_host``: its
        runtime is configured from pods (`node.RealNode.runtime_binds`); ``host_alias``: the path at which it shows
        its fake host (`node.RealNode.host_alias`); ``registry_config_dir``: its containerd's registry hosts directory
        (`node.RealNode.registry_config_dir`: a node that pulls from the test registry); ``airgap_allowed``: the
        endpoints beyond the API server an air-gapped node may reach (`metax_dev.realnode.airgap`)."""
        with self._lock:
            if self.workdir is None or self._tracking_parent is None:
                raise errors.NodeError("RealNodes not started")
            index = len(self.nodes)
            if device_root is None and index < len(self.device_roots):
                device_root = self.device_roots[index]
            member = node.RealNode(
                self.control_plane,
                f"{self.prefix}-{index}",
                index,
                base_dir=self.workdir,
                bin_dir=self.bin_dir,
                image_archives=[*self._images, *images],
                tracking_parent=self._tracking_parent,
                device_root=device_root,
                runtime_host=runtime_host,
                host_alias=host_alias,
                registry_config_dir=registry_config_dir,
                airgap_allowed=airgap_allowed,
                verbosity=self.verbosity,
            )
            self.nodes.append(member)
            member.start()
            return member

    def dead_components(self) -> list[str]:
        """``<node>/<process>`` for every node process that exited."""
        return [
            f"{member.name}/{name}"
            for member in self.nodes
            for name, process in member.node_processes.items()
            if not process.alive()
        ]

    def stop(self) -> None:
        """Stop every node, restore the sysctls, remove the work dir; safe to call twice."""
        started = time.monotonic()
        with self._lock:
            problems: list[str] = []
            for member in reversed(self.nodes):
                try:
                    member.stop(keep_dir=self.keep_workdir, keep_cgroup_parents=self._cgroup_parents)
                except Exception as exc:  # keep going: the other nodes and the host still need cleaning
                    logger.exception("stopping real node %s failed", member.name)
                    problems.append(f"{member.name}: {exc}")
            self.nodes.clear()
            if self.sysctls:
                try:
                    hygiene.release_sysctls(os.getpid(), self.sysctls)
                except OSError as exc:
                    problems.append(f"restoring sysctls: {exc}")
                self.sysctls = {}
            if self._tracking_parent is not None:
                with contextlib.suppress(OSError):  # another launcher's nodes are still there
                    self._tracking_parent.rmdir()
            if self.workdir is not None and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            elif self.workdir is not None:  # disowned: never reaped, kept for its logs
                with contextlib.suppress(OSError):
                    (self.workdir / processes.OWNER_FILE).unlink()
                logger.info("kept real-node work dir %s", self.workdir)
            processes.forget_at_exit(self)
        self.stopped_seconds = time.monotonic() - started
        if problems:
            raise errors.NodeError("teardown problems: " + "; ".join(problems))


def reap_stale(parent: Path | None = None) -> list[str]:
    """Clean up after launchers that were killed outright (their kubelets and containerd died with
    them, by parent-death signal; containers, shims, cgroups and changed sysctls did not)."""
    done: list[str] = []
    for workdir in sorted((parent or Path(tempfile.gettempdir())).glob(f"{WORKDIR_PREFIX}*")):
        try:
            owner = int((workdir / processes.OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # kept on purpose, or being created
        if owner == os.getpid() or processes.pid_alive(owner):
            continue
        tracking = hygiene.tracking_hierarchy() / hygiene.TRACKING_DIR
        for node_dir in sorted(
            d for d in workdir.iterdir() if (d / "containerd").is_dir() or (d / podnet.RECORD).is_file()
        ):
            ids = containerd.Layout(node_dir / "containerd").container_ids()
            hygiene.remove_container_cgroups(ids, keep_parents=())
            hygiene.remove_cgroup(tracking / f"{workdir.name}-{node_dir.name}")
            podnet.release(node_dir)
            airgap.release(node_dir)
        sysctls = workdir / "sysctls.json"
        if sysctls.is_file():
            hygiene.release_sysctls(owner, json.loads(sysctls.read_text()))
        shutil.rmtree(workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            tracking.rmdir()
        done.append(f"cleaned up after launcher pid {owner}: {workdir}")
    return done
