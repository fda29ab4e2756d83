"""One real node: containerd, runc and a kubelet in the node's own namespace, joined to the test
control plane and Ready for pods.

Why this module exists: it owns the order that makes a real node work on this machine (mount
namespace, containerd, local images, CNI, kubelet identity and config, kubelet, registration, the
stand-in cloud controller, Ready) and the reverse order that leaves nothing behind (kubelet, the
containers' processes and cgroups, containerd, whatever is left in the node's tracking cgroup,
shims included, the namespace with every mount in it, the Node object, the directory). Every wait
fails with the tail of the log of the process being waited for.
"""

from __future__ import annotations

import datetime
import json
import logging
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metax_core.wire import host
from metax_dev.controlplane import network, processes
from metax_dev.realnode import airgap, cloud, cni, containerd, errors, hostns, hygiene, images, kubelet, podnet

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from metax_dev.controlplane.cluster import ControlPlane

logger = logging.getLogger(__name__)


@dataclass
class NodeTimings:
    """Seconds spent in each phase of :meth:`RealNode.start` and :meth:`RealNode.stop`."""

    namespace: float | None = None
    containerd: float | None = None
    images: float | None = None
    kubelet_registered: float | None = None
    ready: float | None = None
    stop: float | None = None
    kubelet_restarts: list[float] = field(default_factory=list)


class RealNode:
    """A kubelet + containerd + runc node named ``name``; ``index`` picks its pod range."""

    def __init__(
        self,
        control_plane: ControlPlane,
        name: str,
        index: int,
        *,
        base_dir: Path,
        bin_dir: Path,
        image_archives: Sequence[Path],
        tracking_parent: Path,
        device_root: Path | None = None,
        runtime_host: bool = False,
        host_alias: Path | None = None,
        registry_config_dir: Path | None = None,
        airgap_allowed: Sequence[str] | None = None,
        verbosity: int = 1,
        startup_timeout: float = 90.0,
    ) -> None:
        self.control_plane = control_plane
        self.name = name
        self.index = index
        self.dir = base_dir / name
        self.bin_dir = bin_dir
        self.image_archives = list(image_archives)
        self.device_root = device_root
        self.verbosity = verbosity
        self.startup_timeout = startup_timeout
        self.tracking_cgroup = tracking_parent / f"{base_dir.name}-{name}"
        if runtime_host and device_root is None:
            raise errors.NodeError(f"node {name}: a runtime host needs a device root (the fake host its pods see)")
        self.runtime_host = runtime_host
        self.host_alias = host_alias
        """Another fake host's root path, at which this node shows its own (``device_root``): hostPaths under one test
        prefix then name each node's own fake host, as one hostPath names each real node's own directory."""
        if host_alias is not None and device_root is None:
            raise errors.NodeError(f"node {name}: a host alias needs a device root (the fake host shown there)")
        """Whether container-runtime and maca configure this node from their pods: the fake host's runtime-facing
        directories are the node's own in its mount namespace (`runtime_binds`)."""
        self.registry_config_dir = registry_config_dir
        """containerd's registry ``config_path`` (``<host>/hosts.toml`` per registry: the test registry's,
        `metax_dev.registry.Registry.write_containerd_hosts`); None: containerd's defaults. A path under the temp
        dir: the node's namespace sees it where the host does."""
        self.airgap_allowed = None if airgap_allowed is None else list(airgap_allowed)
        """``IP:PORT`` endpoints beyond the API server (the test registry's) an air-gapped node may connect to
        (`metax_dev.realnode.airgap`); None: no fence."""
        etc = device_root / "etc" / "containerd" if runtime_host and device_root is not None else None
        self.containerd_layout = containerd.Layout(self.dir / "containerd", etc)
        self.kubelet_layout = kubelet.Layout(self.dir / "kubelet")
        self.log_dir = self.dir / "logs"
        self.network: podnet.PodNetwork | None = None
        self.timings = NodeTimings()
        self.namespace: hostns.MountNamespace | None = None
        self._processes: dict[str, processes.Process] = {}
        self._kubelet_args: list[str] = []
        self.kubelet_port = 0

    # ------------------------------------------------------------------ paths and helpers

    @property
    def cdi_dirs(self) -> list[Path]:
        """containerd's CDI spec directories: the node's own, and the fake host's if it has one."""
        dirs = [self.dir / "cdi"]
        if self.device_root is not None:
            dirs.append(self.device_root / "var/run/cdi")
        return dirs

    @property
    def pod_cidr(self) -> str:
        """The node's pod range (a /24 of `podnet.RANGE`, claimed at start)."""
        if self.network is None:
            raise errors.NodeError(f"node {self.name} has no pod network (not started)")
        return self.network.subnet

    @property
    def containerd_socket(self) -> Path:
        """containerd's socket as this process opens it (through the node's namespace holder)."""
        if self.namespace is None:
            raise errors.NodeError(f"node {self.name} is not running")
        return self.namespace.path(self.containerd_layout.socket)

    def proc(self, pid: int) -> Path:
        """``/proc/<pid>`` of a process of the node's PID namespace (a container's, as containerd reports it)."""
        if self.namespace is None:
            raise errors.NodeError(f"node {self.name} is not running")
        return self.namespace.path(f"/proc/{pid}")

    def program_pid(self, process: processes.Process) -> int:
        """The program a `spawn` started, in this machine's PID namespace (the process held is its ``nsenter``)."""
        if self.namespace is None or process.popen is None:
            raise errors.NodeError(f"node {self.name}: {process.name} is not running")
        return self.namespace.inner_pid(process.popen.pid)

    @property
    def alias_binds(self) -> list[tuple[Path, str]]:
        """The fake host bound at `host_alias` in the node's namespace (none without one)."""
        if self.host_alias is None or self.device_root is None:
            return []
        return [(self.device_root, str(self.host_alias))]

    @property
    def runtime_binds(self) -> list[tuple[Path, str]]:
        """On a runtime host, the fake host's directories bound at their host paths in the node's namespace: the
        root file's (the agent's pod edits it, containerd reads it), ``/var/lib/metax`` (the wrapper and the SDK
        versions the pods install, which containerd's shims and runc use) and ``/run/metax`` (the container-edit
        socket the wrapper dials)."""
        if not self.runtime_host or self.device_root is None:
            return []
        return [
            (self.device_root / "etc" / "containerd", host.CONTAINERD_CONFIG_DIR),
            (self.device_root / "var" / "lib" / "metax", host.STATE_DIR),
            (self.device_root / "run" / "metax", host.RUN_DIR),
        ]

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet_layout.pod_resources_socket

    @property
    def node_processes(self) -> dict[str, processes.Process]:
        """The node's own long-running processes (namespace holder, containerd, kubelet)."""
        return dict(self._processes)

    def log_path(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def log_tail(self, component: str, lines: int = 60) -> str:
        return processes.tail(self.log_path(component), lines)

    def _api(self) -> ApiClient:
        return self.control_plane.api_client()

    def _wait(self, predicate: Callable[[], bool], what: str, component: str, *, timeout: float | None = None) -> None:
        try:
            processes.wait_for(
                predicate,
                f"{what} ({self.name})",
                processes=self._processes,
                log_path=self.log_path(component),
                timeout=timeout or self.startup_timeout,
                interval=0.1,
            )
        except errors.NodeError:
            raise
        except Exception as exc:
            raise errors.NodeError(str(exc)) from exc

    def spawn(self, name: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> processes.Process:
        """Start ``command`` in the node's namespace and cgroup (``env`` added), logging to ``<name>.log``.

        The caller owns the process (stop it); whatever it leaves in the node's cgroup dies at
        :meth:`stop`.
        """
        if self.namespace is None:
            raise errors.NodeError(f"node {self.name} is not running")
        prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())]
        process = processes.Process(name, self.namespace.wrap([*prefix, *command]), self.log_path(name))
        process.start()
        return process

    def airgap_dropped(self) -> int:
        """Packets the node's air-gap fence dropped so far (`metax_dev.realnode.airgap.dropped`)."""
        return airgap.dropped(self.dir)

    def airgap_probe(self) -> None:
        """Reach for a TEST-NET address as one of the node's processes; NodeError if the connection is made."""
        if self.namespace is None:
            raise errors.NodeError(f"node {self.name} is not running")
        airgap.probe(self.namespace.wrap)

    def _start_process(self, name: str, command: Sequence[str]) -> processes.Process:
        process = self.spawn(name, command)
        self._processes[name] = process
        return process

    # ------------------------------------------------------------------ start

    def start(self) -> RealNode:
        started = time.monotonic()
        self.dir.mkdir(parents=True)
        self.tracking_cgroup.mkdir(parents=True, exist_ok=True)
        cgroups = [self.tracking_cgroup]
        if self.airgap_allowed is not None:
            cgroups.append(airgap.make_cgroup(self.dir))
        self.namespace = hostns.MountNamespace(
            self.dir / "ns",
            self.bin_dir / "pause",
            self.log_path("namespace"),
            device_root=self.device_root,
            pod_resources_dir=self.kubelet_layout.pod_resources_socket.parent,
            join_cgroups=cgroups,
            binds=[*self.runtime_binds, *self.alias_binds],
        )
        self._processes["namespace"] = self.namespace.process
        self.namespace.start()
        self.timings.namespace = time.monotonic() - started

        self._start_containerd()
        self.timings.containerd = time.monotonic() - started
        images.import_images(self.bin_dir / "ctr", self.containerd_socket, self.image_archives)
        self.timings.images = time.monotonic() - started

        self._start_kubelet()
        api = self._api()
        try:
            self._wait(lambda: _node_exists(api, self.name), "the Node object", "kubelet")
            self.timings.kubelet_registered = time.monotonic() - started
            cloud.initialize(api, self.name)
            self._wait(lambda: node_ready(api, self.name), "node Ready", "kubelet")
        finally:
            api.close()  # type: ignore[no-untyped-call]
        self.timings.ready = time.monotonic() - started
        logger.info("real node %s Ready in %.1fs", self.name, self.timings.ready)
        return self

    def _start_containerd(self) -> None:
        layout = self.containerd_layout
        cni_dir = self.dir / "cni"
        apiserver = self.control_plane.server_url.split("//")[1]
        self.network = podnet.claim(self.dir, self._kubernetes_service(), apiserver)
        stream_port = network.free_port()
        if self.airgap_allowed is not None:
            # Before containerd's first start: it never runs outside the fence.
            allowed = [apiserver, self.network.service, *self.airgap_allowed, f"127.0.0.1:{stream_port}"]
            airgap.seal(self.dir, self.network, allowed)
        cni.install(
            cni_dir / "bin",
            cni_dir / "conf",
            cni_dir / "leases",
            self.network.subnet,
            self.network.gateway,
            self.network.veth_prefix,
        )
        for directory in self.cdi_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        text = containerd.config_text(
            layout,
            bin_dir=self.bin_dir,
            cni_bin_dir=cni_dir / "bin",
            cni_conf_dir=cni_dir / "conf",
            cdi_dirs=self.cdi_dirs,
            stream_port=stream_port,
            registry_config_dir=self.registry_config_dir,
        )
        containerd.write_config(layout, text)
        self._start_process("containerd", containerd.write_service(self.bin_dir, layout))
        self._wait(self._containerd_serving, "containerd", "containerd")

    def _kubernetes_service(self) -> str:
        """``<ClusterIP>:<port>`` of the ``kubernetes`` Service, which pods dial (``KUBERNETES_SERVICE_HOST``)."""
        from kubernetes import client as kube

        api = self._api()
        try:
            service: Any = kube.CoreV1Api(api).read_namespaced_service("kubernetes", "default")
        finally:
            api.close()  # type: ignore[no-untyped-call]
        return f"{service.spec.cluster_ip}:{service.spec.ports[0].port}"

    def _containerd_serving(self) -> bool:
        if not self.containerd_socket.exists():
            return False
        done = subprocess.run(
            [str(self.bin_dir / "ctr"), "--address", str(self.containerd_socket), "version"],
            capture_output=True,
            check=False,
            timeout=10,
        )
        return done.returncode == 0

    def _start_kubelet(self) -> None:
        layout = self.kubelet_layout
        serving = kubelet.write_identity(layout, self.control_plane.authority, self.name, self.control_plane.server_url)
        self.kubelet_port = network.free_port()
        body = kubelet.config(
            layout,
            serving=serving,
            ca=self.control_plane.ca_path,
            runtime_socket=Path(self.containerd_layout.socket),
            port=self.kubelet_port,
            healthz_port=network.free_port(),
        )
        kubelet.write_config(layout, body)
        self._kubelet_args = kubelet.command(self.bin_dir / "kubelet", layout, self.name, self.verbosity)
        self._start_process("kubelet", self._kubelet_args)

    def restart_kubelet(self) -> float:
        """Stop the kubelet (SIGTERM) and start it again; returns seconds until the node is Ready."""
        started = time.monotonic()
        self._processes.pop("kubelet").stop()
        self._start_process("kubelet", self._kubelet_args)
        api = self._api()
        try:
            self._wait(self._kubelet_healthy, "kubelet healthz after restart", "kubelet")
            self._wait(lambda: node_ready(api, self.name), "node Ready after restart", "kubelet")
        finally:
            api.close()  # type: ignore[no-untyped-call]
        seconds = time.monotonic() - started
        self.timings.kubelet_restarts.append(seconds)
        return seconds

    def containerd_pid(self) -> int | None:
        """The PID of the containerd serving the node's socket (None: none does)."""
        from metax_core.errors import HardwareError
        from metax_hw import container_runtime

        try:
            return container_runtime.peer_pid(str(self.containerd_socket), timeout=2)
        except HardwareError:
            return None

    def restart_containerd(self) -> float:
        """Have containerd's supervisor restart it (``svc -t``: SIGTERM, and ``supervise`` starts it again); running
        containers keep running (their shims are not containerd's children). Returns seconds until the node is whole
        again (`wait_containerd_back`)."""
        started = time.monotonic()
        before = self.containerd_pid()
        self._svc("-t")
        self.wait_containerd_back(before)
        return time.monotonic() - started

    def wait_containerd_back(self, before: int | None, *, since: datetime.datetime | None = None) -> None:
        """Until a containerd other than PID ``before`` serves, and the kubelet has reported the node's status since
        (a status the kubelet computed while containerd was down says ``containerd://Unknown``; a later test
        reading the Node must not see that one)."""
        self._wait(
            lambda: self.containerd_pid() not in (None, before) and self._containerd_serving(),
            "containerd after restart",
            "containerd",
        )
        back = since or datetime.datetime.now(datetime.UTC)
        api = self._api()
        try:
            self._wait(
                lambda: runtime_reported_since(api, self.name, back),
                "the kubelet's node status with containerd back",
                "kubelet",
            )
        finally:
            api.close()  # type: ignore[no-untyped-call]

    def _svc(self, *flags: str) -> None:
        done = subprocess.run(
            [containerd.SVC, *flags, str(self.containerd_layout.service)],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        if done.returncode != 0:
            raise errors.NodeError(f"svc {' '.join(flags)} on {self.name}'s containerd: {done.stderr.strip()}")

    def _stop_containerd(self) -> None:
        """``svc -dx``: containerd gets SIGTERM, ``supervise`` exits once it is down (it ignores SIGTERM itself)."""
        process = self._processes.pop("containerd", None)
        if process is None:
            return
        if process.alive():
            try:
                self._svc("-dx")
            except (errors.NodeError, subprocess.TimeoutExpired) as exc:
                logger.warning("%s: %s; stopping containerd's supervisor by signal", self.name, exc)
        process.wait_stopped(timeout=20)

    def _kubelet_healthy(self) -> bool:
        port = json.loads(self.kubelet_layout.config.read_text())["healthzPort"]
        url = f"http://{network.LOOPBACK}:{port}/healthz"
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)

    # ------------------------------------------------------------------ stop

    def stop(self, *, keep_dir: bool = False, keep_cgroup_parents: Iterable[Path] = ()) -> None:
        """Stop everything the node started and remove what it left; safe to call twice.

        Every step runs even when an earlier one failed; the failures are raised together at the end.
        """
        started = time.monotonic()
        problems: list[str] = []

        def step(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as exc:  # keep cleaning: the rest of the host still needs it
                logger.exception("%s: %s failed", self.name, what)
                problems.append(f"{what}: {exc}")

        def stop_process(name: str) -> None:
            process = self._processes.pop(name, None)
            if process is not None:
                process.stop(timeout=10)

        step("stop kubelet", lambda: stop_process("kubelet"))
        # Containers first (their cgroups are /k8s.io/<id>, shared by every node on this machine).
        ids = self.containerd_layout.container_ids()
        step("remove containers", lambda: hygiene.remove_container_cgroups(ids, keep_cgroup_parents))
        step("stop containerd", self._stop_containerd)
        # Shims and anything else the node's processes forked.
        step("remove the node's cgroup", lambda: hygiene.remove_cgroup(self.tracking_cgroup))
        if self.namespace is not None:
            step("stop the namespace holder", self.namespace.stop)
            self.namespace = None
        self._processes.clear()
        # After the namespace: the pods' network namespaces (and their veths) went with it.
        step("release the pod network", lambda: podnet.release(self.dir))
        step("remove the air gap", lambda: airgap.release(self.dir))
        self.network = None
        step("delete the Node object", self._delete_node_object)
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.timings.stop = time.monotonic() - started
        if problems:
            raise errors.NodeError(f"node {self.name}: " + "; ".join(problems))

    def _delete_node_object(self) -> None:
        from kubernetes import client as kube
        from kubernetes.client.exceptions import ApiException

        api = self._api()
        try:
            kube.CoreV1Api(api).delete_node(self.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            api.close()  # type: ignore[no-untyped-call]


def _node_exists(api: ApiClient, name: str) -> bool:
    from kubernetes import client as kube
    from kubernetes.client.exceptions import ApiException

    try:
        kube.CoreV1Api(api).read_node(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def runtime_reported_since(api: ApiClient, name: str, since: datetime.datetime) -> bool:
    """Whether the kubelet posted the Node's status after ``since`` (its Ready heartbeat, whole seconds, so
    strictly later than ``since``'s second), Ready and with a known container runtime version."""
    from kubernetes import client as kube

    node: Any = kube.CoreV1Api(api).read_node(name)
    ready = [c for c in (node.status.conditions or []) if c.type == "Ready" and c.status == "True"]
    known = not str(node.status.node_info.container_runtime_version).endswith("Unknown")
    fresh = bool(ready) and ready[0].last_heartbeat_time > since.replace(microsecond=0)
    return known and fresh


def node_ready(api: ApiClient, name: str) -> bool:
    """Whether the Node's Ready condition is True."""
    from kubernetes import client as kube

    node: Any = kube.CoreV1Api(api).read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
