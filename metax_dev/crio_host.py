"""A real CRI-O for the container-runtime agent to configure, run here (docs/container-runtime.md): CRI-O built from
its Go module (`metax_dev.controlplane.build.build_crio`: ``crio``, ``pinns``, and ``copyimg``, which puts an image
archive into CRI-O's storage, since no registry is reachable), Debian's ``conmon`` and the harness's runc.

The node's private mount namespace (`metax_dev.containerd_host.Namespace`) has its own ``/run``, held by a sleeping
process for the node's whole life: CRI-O, its conmons, runc's state (``/run/runc``), the pinned pod namespaces and the
storage's mounts live there and never reach the host's, and they outlive a restart of CRI-O as a node's ``/run``
outlives a restart of its ``crio`` unit (so containers keep running across it, each held by its conmon). The
harness's service manager (`metax_dev.containerd_host.Supervisor`: restart = stop + start, ``fail_starts``) starts
CRI-O in that namespace.

`CrioNode` is one such daemon: the administrator's ``crio.conf`` (`CrioNode.admin_config`: every path CRI-O uses is
the node's directory or the namespace's ``/run``; storage driver ``overlay``; ``cgroup_manager = "cgroupfs"``, no
systemd here; no CNI: pods use the node's network), its ``crio.conf.d``, the agent's settings for it (host root
``/``, every path under the node's directory, host programs run directly, as `containerd_host.RuntimeNode` does for
containerd) and an in-memory cluster with its Node. What this machine needs (docs/realnode.md "Sandbox limits"):

* no ``CAP_SYS_RESOURCE``: runc cannot lower a process's ``oom_score_adj``, and CRI-O gives a pod's infra
  container -998 with no option to restrict it (containerd has ``restrict_oom_score_adj``). CRI-O creates no
  infra container when the pod does not share its PID namespace and ``drop_infra_ctr`` is on (its default):
  the tests' pods are what the kubelet sends for such a pod (PID namespace mode CONTAINER, `tests/containerruntime/
  cri.py`), so only their own containers run, at ``oom_score_adj`` 0; pinns holds the pod's namespaces;
* the overlay driver bind-mounts its home onto itself, and containers/image keeps a blob cache in
  ``/var/lib/containers/cache`` and big temporary files in ``/var/tmp``: `copyimg` runs in a private namespace of
  its own with tmpfs over both, so nothing reaches the host's.

`CrioNode.close` kills the containers in the node's cgroup (no grace period to wait out), removes every pod sandbox
through CRI, stops CRI-O, kills what is left in the namespace and the cgroup (conmons), lets the namespace go (every
mount with it), removes the node's cgroup directories and its directory: nothing is left behind.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import shutil
import subprocess
import time
from typing import Any, ClassVar

import attrs

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.runtime import crio, handler
from metax_core.wire import host
from metax_dev import containerd_host
from metax_dev.realnode import images
from metax_hw import cri_calls
from metax_k8s.inmemory import cluster as inmemory

NODE = "crio-node"
CONMON = pathlib.Path("/usr/bin/conmon")
POLICY = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
"""containers/image's signature policy for the node's local images (CRI-O verifies a policy even for them)."""
CGROUP_ROOT = pathlib.Path(host.CGROUP_DIR)
_serial = itertools.count()


def crio_bin() -> pathlib.Path:
    """crio, pinns and copyimg (`build.build_crio`, cached)."""
    from metax_dev.controlplane import build

    return build.build_crio(quiet=True).bin_dir


def _comm(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@attrs.define
class CrioFiles(containerd_host.AgentHost):
    """A CRI-O host under ``base``: the administrator's files under ``etc/crio``, the daemon on ``crio.sock``, and what
    it serves. The real CRI-O node (`CrioNode`) and the fake's (tests/containerruntime) both are one."""

    NODE: ClassVar[str] = NODE
    SERVE_TIMEOUT: ClassVar[float] = 60.0
    """Seconds `running` waits for the daemon to serve."""

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
    def dropin(self) -> pathlib.Path:
        return pathlib.Path(crio.dropin_path(str(self.config_dir)))

    @property
    def binary(self) -> pathlib.Path:
        return self.base / "bin" / "crio"

    @property
    def socket(self) -> pathlib.Path:
        return self.base / "crio.sock"

    @property
    def wrapper(self) -> pathlib.Path:
        return self.toolkit / handler.WRAPPER_NAME

    def runtime_settings(self) -> dict[str, Any]:
        return {
            "runtime": "crio",
            "crio_config": str(self.config),
            "crio_config_dir": str(self.config_dir),
            "crio_binary": str(self.binary),
            "runtime_socket": str(self.socket),
        }

    def running(self, timeout: float | None = None) -> dict[str, Any]:
        """The running daemon's configuration (``GET /config``, what ``crio status config`` prints), waiting for
        it to serve."""
        deadline = time.monotonic() + (self.SERVE_TIMEOUT if timeout is None else timeout)
        while True:
            try:
                text = cri_calls.unix_http_get(str(self.socket), "/config", timeout=5).decode()
                return dict(crio.parse(text, "GET /config"))
            except (HardwareError, InvalidSpec) as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"CRI-O does not serve: {exc}\n{self.log_tail()}") from None
            time.sleep(0.1)

    def crio_config(self) -> subprocess.CompletedProcess[str]:
        """``crio --config <crio.conf> --config-dir <crio.conf.d> config`` (the agent's dry run)."""
        argv = [str(self.binary), "--config", str(self.config), "--config-dir", str(self.config_dir), "config"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@attrs.define
class CrioNode(CrioFiles):
    """The real CRI-O, built here, in a mount namespace of its own (`containerd_host.Namespace`)."""

    bin_dir: pathlib.Path = attrs.field(kw_only=True)
    """crio, pinns, copyimg."""
    runc: pathlib.Path = attrs.field(kw_only=True)
    namespace: containerd_host.Namespace = attrs.field(kw_only=True)
    cgroup_parent: str = attrs.field(kw_only=True)
    """The pods' cgroup parent (cgroupfs: a path under each hierarchy), the node's own."""

    @property
    def binary(self) -> pathlib.Path:
        return self.bin_dir / "crio"

    @property
    def cdi_dir(self) -> pathlib.Path:
        """CRI-O's CDI spec directory (``cdi_spec_dirs``), where gpu-device's spec goes."""
        return self.base / "cdi"

    @property
    def log_dir(self) -> pathlib.Path:
        """The pods' log directory."""
        return self.base / "pods"

    def admin_config(self) -> str:
        """The administrator's ``crio.conf``, as a distribution ships it: only what differs from CRI-O's defaults,
        here every path the node's own (the rest of CRI-O's paths are in the namespace's ``/run``)."""
        b = self.base
        return f"""# the distribution's crio.conf: only what differs from CRI-O's defaults
[crio]
root = "{b}/storage"
runroot = "{b}/storage-run"
storage_driver = "overlay"
log_dir = "{b}/pods"
clean_shutdown_file = "{b}/lib/clean.shutdown"

[crio.api]
listen = "{self.socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
conmon = "{CONMON}"
conmon_cgroup = "pod"
# no systemd on this node
cgroup_manager = "cgroupfs"
pinns_path = "{self.bin_dir / "pinns"}"
decryption_keys_path = "{b}/keys"
hooks_dir = []
cdi_spec_dirs = ["{self.cdi_dir}"]
apparmor_profile = ""
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
enable_criu_support = false

[crio.runtime.runtimes.runc]
runtime_path = "{self.runc}"
runtime_type = "oci"
runtime_root = "/run/runc"

[crio.image]
signature_policy = "{b}/policy.json"
signature_policy_dir = "{b}/policies"
namespaced_auth_dir = "{b}/auth"
pause_image = "{images.PAUSE_IMAGE}"

[crio.network]
network_dir = "{b}/cni/net.d"
plugin_dirs = ["{b}/cni/bin"]

[crio.nri]
enable_nri = false
"""

    # -- the daemon ------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.supervisor.start()
        self.running()

    def handlers(self) -> dict[str, Any]:
        return dict(self.running()["crio"]["runtime"]["runtimes"])

    def import_images(self, pause: pathlib.Path) -> None:
        """The sandbox image and busybox (`metax_dev.realnode.images`) into CRI-O's storage with copyimg: before any
        pod, since CRI-O needs the sandbox image even when it runs no infra container, and would try to pull it."""
        archives = images.write_test_images(self.base / "images", pause=pause)
        names = (images.PAUSE_IMAGE, images.BUSYBOX_IMAGE)
        (self.base / "tmp").mkdir(exist_ok=True)
        for name, archive in zip(names, archives, strict=True):
            copy = [
                str(self.bin_dir / "copyimg"),
                "--root", f"{self.base}/storage", "--runroot", f"{self.base}/storage-run",
                "--storage-driver", "overlay", "--signature-policy", f"{self.base}/policy.json",
                "--image-name", name, "--import-from", f"oci-archive:{archive}",
            ]  # fmt: skip
            # its own namespace: the overlay driver's mount of its home, containers/image's blob cache and big
            # temporary files stay off the host
            setup = 'mount -t tmpfs tmpfs /var/lib/containers && mount -t tmpfs tmpfs /var/tmp && exec "$@"'
            if not pathlib.Path("/var/lib/containers").is_dir():
                setup = 'mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /var/tmp && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup, "sh", *copy]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"copyimg {name} failed: {done.stderr.strip()}")

    # -- teardown --------------------------------------------------------------------------------------------

    def _cgroup_dirs(self) -> list[pathlib.Path]:
        name = self.cgroup_parent.strip("/")
        found = []
        for hierarchy in CGROUP_ROOT.iterdir():
            for top in (hierarchy / name, hierarchy / "unified" / name):
                if top.is_dir():
                    found.append(top)
        return found

    def _cgroup_members(self) -> list[int]:
        pids: set[int] = set()
        for top in self._cgroup_dirs():
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(line) for line in procs.read_text().split())
        return sorted(pids)

    def _remove_sandboxes(self) -> None:
        """Stop and remove every pod sandbox through CRI (their containers go with them), as the kubelet would."""
        import grpc

        def call(channel: grpc.Channel, method: str, request: bytes) -> bytes:
            stub = channel.unary_unary(
                f"/runtime.v1.RuntimeService/{method}",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            answer: bytes = stub(request, timeout=60)
            return answer

        with contextlib.suppress(grpc.RpcError), grpc.insecure_channel(f"unix://{self.socket}") as channel:
            for sandbox, _ in cri_calls.listed_sandboxes(call(channel, "ListPodSandbox", b"")):
                with contextlib.suppress(grpc.RpcError):  # one that cannot stop is killed below
                    call(channel, "StopPodSandbox", cri_calls.text_field(1, sandbox))
                    call(channel, "RemovePodSandbox", cri_calls.text_field(1, sandbox))

    def close(self) -> None:
        """Everything the node started goes: its pods, CRI-O, conmons, containers, mounts, cgroups, files."""
        containers = [p for p in self._cgroup_members() if _comm(p) != "conmon"]
        containerd_host.kill_all(containers)  # no grace period to wait out: each conmon sees its container exit
        containerd_host.wait_gone(containers)
        if self.supervisor.pid is not None:
            self._remove_sandboxes()
        self.supervisor.stop()
        left = self._cgroup_members()
        containerd_host.kill_all(left)
        containerd_host.wait_gone(left)
        self.namespace.stop()
        for top in self._cgroup_dirs():
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
        shutil.rmtree(self.base, ignore_errors=True)


def make(base: pathlib.Path, *, bin_dir: pathlib.Path, runc: pathlib.Path) -> CrioNode:
    """A node directory with the stand-in wrapper in its "image" and its namespace up; CRI-O is not started (the
    test writes the administrator's files first, `CrioNode.admin_config`)."""
    (base / "image").mkdir(parents=True)
    (base / "etc" / "crio" / "crio.conf.d").mkdir(parents=True)
    (base / "var" / "lib" / "metax").mkdir(parents=True)  # the DaemonSet's host path (shared by the agents)
    (base / "policy.json").write_text(POLICY)
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    namespace = containerd_host.Namespace()
    etc = base / "etc" / "crio"
    args = ["--config", str(etc / "crio.conf"), "--config-dir", str(etc / "crio.conf.d")]
    supervisor = containerd_host.Supervisor(
        bin_dir / "crio", etc / "crio.conf", base / "crio.log", env, args=args, namespace=namespace
    )
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
    node = CrioNode(
        base,
        supervisor,
        k8s,
        bin_dir=bin_dir,
        runc=runc,
        namespace=namespace,
        cgroup_parent=f"/metax-crio-{os.getpid()}-{next(_serial)}",
    )
    containerd_host.stand_in_wrapper(node.wrapper_source, runc, node.calls)
    namespace.start()
    return node
