"""The test control plane as one object: start it, use it, restart its API server, stop it.

Why this module exists: tests and developers want "a cluster with N nodes" and nothing less than
a real one. :class:`ControlPlane` owns the order that makes that work (etcd, then
kube-apiserver, then kwok, kube-controller-manager and kube-scheduler once the API answers, then
the kwok nodes), waits for each step with the failing component's log at hand, records how long
each phase took, and guarantees that nothing it started outlives it: :meth:`ControlPlane.stop`,
``__exit__`` and an ``atexit`` hook all tear it down.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from metax_dev.controlplane import build, components, errors, network, nodes, pki, processes, targets

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

logger = logging.getLogger(__name__)


@dataclass
class Timings:
    """Seconds spent in each phase of :meth:`ControlPlane.start` (``None``: not done)."""

    build: float | None = None
    first_api: float | None = None
    nodes_ready: float | None = None
    total: float | None = None
    apiserver_restarts: list[float] = field(default_factory=list)

    def summary(self) -> str:
        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        return (
            f"build {fmt(self.build)}, first usable API {fmt(self.first_api)}, "
            f"nodes ready {fmt(self.nodes_ready)}, total {fmt(self.total)}"
        )


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok on 127.0.0.1.

    ``nodes`` kwok nodes named ``<node_prefix>-<i>`` are created and awaited Ready by
    :meth:`start`. ``workloads=False`` starts only etcd, kube-apiserver and kwok (no pods
    get scheduled then). ``bin_dir`` skips :func:`build.build`. ``kubernetes_bin_dir`` takes
    kube-apiserver, kube-controller-manager and kube-scheduler from there instead (the oldest supported
    minor: ``build.build_oldest().bin_dir``, R-COMPAT; etcd and kwok stay). The working directory (PKI,
    etcd data, logs, kubeconfigs) is removed by :meth:`stop` unless ``keep_workdir`` or
    ``$METAX_CONTROLPLANE_KEEP=1``.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        bin_dir: Path | None = None,
        kubernetes_bin_dir: Path | None = None,
        workloads: bool = True,
        node_prefix: str = "kwok-node",
        node_cpu: str = "32",
        node_memory: str = "256Gi",
        node_pods: str = "110",
        node_labels: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
        keep_workdir: bool | None = None,
        workdir_parent: Path | None = None,
        verbosity: int = 1,
        scheduler_extenders: Sequence[Mapping[str, Any]] | None = None,
        node_lease_seconds: int = 40,
        pod_ready_seconds: float = 0.0,
    ) -> None:
        """``node_lease_seconds``: how long a kwok node's Lease lasts (kwok renews it within that time, and
        kube-controller-manager marks the node NotReady 10 s after it expires): thousands of kwok nodes on two
        cores need minutes, or kwok falls behind its renewals and nodes flap NotReady (benchmarks/operator_scale).
        ``pod_ready_seconds``: how long a pod bound to a kwok node waits before kwok makes it Running and Ready
        (kwok's default stages: at once; benchmarks/upgrade.py gives its pods a real agent's start-up)."""
        if nodes < 0:
            raise ValueError("nodes must be >= 0")
        self.initial_nodes = nodes
        self.bin_dir = bin_dir
        self.kubernetes_bin_dir = kubernetes_bin_dir
        self.workloads = workloads
        self.node_prefix = node_prefix
        self.node_cpu = node_cpu
        self.node_memory = node_memory
        self.node_pods = node_pods
        self.node_labels = dict(node_labels or {})
        self.node_lease_seconds = node_lease_seconds
        self.pod_ready_seconds = pod_ready_seconds
        self.startup_timeout = startup_timeout
        self.keep_workdir = (
            keep_workdir if keep_workdir is not None else os.environ.get("METAX_CONTROLPLANE_KEEP") == "1"
        )
        self.workdir_parent = workdir_parent
        self.verbosity = verbosity
        self.scheduler_extenders = [dict(e) for e in scheduler_extenders or ()]
        """KubeSchedulerConfiguration ``extenders`` for kube-scheduler (empty: its built-in defaults, no config)."""
        self.timings = Timings()
        self.node_names: list[str] = []
        self.build_result: build.BuildResult | None = None
        self._workdir: Path | None = None
        self._processes: dict[str, processes.Process] = {}
        self._ports: dict[str, int] = {}
        self._config: components.Config | None = None
        self._lock = threading.RLock()
        self._started = False
        self._restarts_seen = 0
        """kube-apiserver restarts before kwok and the controllers last started (`controllers_behind`)."""

    # ---------------------------------------------------------------- properties

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise errors.ControlPlaneError("control plane not started")
        return self._workdir

    @property
    def kubeconfig_path(self) -> Path:
        """Admin kubeconfig (``system:masters``) with embedded certificates."""
        return self.workdir / "admin.kubeconfig"

    @property
    def server_url(self) -> str:
        return f"https://{network.LOOPBACK}:{self.port('kube-apiserver')}"

    @property
    def ca_path(self) -> Path:
        """The CA that signed the API server's serving certificate."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def etcd_url(self) -> str:
        return f"http://{network.LOOPBACK}:{self.port('etcd')}"

    @property
    def running(self) -> bool:
        return self._started

    def port(self, component: str) -> int:
        try:
            return self._ports[component]
        except KeyError:
            raise errors.ControlPlaneError(f"no port for {component!r} (started?)") from None

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def log_tail(self, component: str, lines: int = 60) -> str:
        return processes.tail(self.log_path(component), lines)

    def pids(self) -> dict[str, int]:
        """Each running component's process id, by name (for a benchmark's CPU accounting from /proc)."""
        return {n: p.popen.pid for n, p in self._processes.items() if p.popen is not None and p.alive()}

    def dead_components(self) -> list[str]:
        """The components started but no longer running (empty while all is well)."""
        return [p.name for p in self._processes.values() if not p.alive()]

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Build (or reuse) the binaries, start every component, create and await the nodes."""
        with self._lock:
            if self._started:
                return self
            if self.bin_dir is None:
                self.build_result = build.build()
                self.bin_dir = self.build_result.bin_dir
                self.timings.build = self.build_result.seconds
            processes.stop_at_exit(self)
            self._started = True
            try:
                self._start_components()
            except BaseException:
                self.stop()
                raise
        return self

    def _start_components(self) -> None:
        started = time.monotonic()
        parent = self.workdir_parent or Path(tempfile.gettempdir())
        self._workdir = processes.new_workdir(parent)
        logger.info("control plane workdir %s", self._workdir)
        for component in components.PORTS:
            self._ports[component] = network.free_port()
        credentials = components.write_credentials(self.workdir, self.server_url)
        components.write_kwok_config(self.workdir, self._binary("kwok"), round(self.pod_ready_seconds * 1000))
        minor = components.kubernetes_minor(self._binary("kube-apiserver"))
        self._config = config = components.Config(
            self.workdir, self._ports, credentials, self.verbosity, minor, self.node_lease_seconds
        )

        self._start("etcd", config.etcd_args())
        self._wait_for(
            lambda: network.http_ok(self.port("etcd"), "/health"),
            "etcd /health",
            "etcd",
            timeout=30.0,
            interval=0.05,
        )
        self._start("kube-apiserver", config.apiserver_args())
        self._wait_apiserver_ready()
        self.timings.first_api = time.monotonic() - started
        logger.info(
            "control plane: first usable API after %.1fs at %s",
            self.timings.first_api,
            self.server_url,
        )

        self._start("kwok", config.kwok_args())
        if self.workloads:
            self._start("kube-controller-manager", config.controller_manager_args())
            self._start("kube-scheduler", config.scheduler_args(self.scheduler_extenders))

        nodes_started = time.monotonic()
        if self.initial_nodes:
            self.add_nodes(self.initial_nodes, wait=True, timeout=self.startup_timeout)
        self.timings.nodes_ready = time.monotonic() - nodes_started

        self._wait_https_healthz("kwok")
        if self.workloads:
            self._wait_https_healthz("kube-controller-manager")
            self._wait_https_healthz("kube-scheduler")
            # The service-account controller runs: pods can be admitted in "default".
            self._wait_for(
                lambda: self._admin_http().ok("/api/v1/namespaces/default/serviceaccounts/default"),
                "the default service account (kube-controller-manager)",
                "kube-controller-manager",
            )
        self.timings.total = time.monotonic() - started
        logger.info("control plane ready: %s", self.timings.summary())

    def stop(self) -> None:
        """Stop every process (whole process groups) and remove the working directory."""
        with self._lock:
            running = [
                self._processes[n]
                for n in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver")
                if n in self._processes
            ]
            for process in running:
                process.terminate()
            for process in running:
                process.wait_stopped(15.0)
            if "etcd" in self._processes:
                self._processes["etcd"].stop(15.0)
            self._processes.clear()
            processes.forget_at_exit(self)
            if self._workdir is not None:
                processes.remove_workdir(self._workdir, keep=self.keep_workdir)
            network.release_ports(self._ports.values())
            self._started = False

    def restart_apiserver(self, timeout: float = 60.0) -> float:
        """Stop kube-apiserver and start it again on the same port with the same etcd data.

        Returns the seconds from stop to ready. Clients' connections and watches break
        and must be re-established by the clients, as in a real API server restart.
        """
        with self._lock:
            process = self._processes.get("kube-apiserver")
            if process is None:
                raise errors.ControlPlaneError("kube-apiserver is not running")
            began = time.monotonic()
            process.stop()
            process.start()
            self._wait_apiserver_ready(timeout)
            seconds = time.monotonic() - began
            self.timings.apiserver_restarts.append(seconds)
            logger.info("kube-apiserver restarted in %.1fs", seconds)
            return seconds

    def restart_scheduler(self, extenders: Sequence[Mapping[str, Any]] = ()) -> None:
        """Start kube-scheduler again with these KubeSchedulerConfiguration ``extenders`` (none: its defaults), as
        an administrator edits the scheduler's configuration; returns once the new one serves ``/healthz``."""
        with self._lock:
            if not self.workloads or "kube-scheduler" not in self._processes:
                raise errors.ControlPlaneError("kube-scheduler is not running")
            self.scheduler_extenders = [dict(e) for e in extenders]
            self._restart(["kube-scheduler"])
            logger.info("kube-scheduler restarted with %d extender(s)", len(self.scheduler_extenders))

    @property
    def controllers_behind(self) -> bool:
        """kube-apiserver restarted since kwok, kube-controller-manager and kube-scheduler last started."""
        return len(self.timings.apiserver_restarts) > self._restarts_seen

    def restart_controllers(self) -> float:
        """Start kwok, kube-controller-manager and kube-scheduler again with the same arguments; the seconds it took.

        After kube-apiserver restarts, their client-go reflectors are in back-off (0.8 s doubling to 30 s, not
        reset for two minutes) and their work queues hold rate-limited requeues: for minutes a DaemonSet's new pods,
        its status and the garbage collector lag behind (docs/controlplane.md). New processes list afresh, so a
        test that restarted the API server hands the next one controllers that see changes at once.
        """
        with self._lock:
            began = time.monotonic()
            self._restart(["kwok", "kube-controller-manager", "kube-scheduler"] if self.workloads else ["kwok"])
            self._restarts_seen = len(self.timings.apiserver_restarts)
            seconds = time.monotonic() - began
            logger.info("kwok and the controllers restarted in %.1fs", seconds)
            return seconds

    def _restart(self, names: Sequence[str]) -> None:
        config = self._config
        if config is None or any(name not in self._processes for name in names):
            raise errors.ControlPlaneError(f"not running: {', '.join(n for n in names if n not in self._processes)}")
        args: dict[str, Callable[[], Sequence[str]]] = {
            "kwok": config.kwok_args,
            "kube-controller-manager": config.controller_manager_args,
            "kube-scheduler": functools.partial(config.scheduler_args, self.scheduler_extenders),
        }
        for name in names:
            self._processes[name].stop()
        if "kwok" in names:  # the new kwok has a new identity: it would wait out the old one's node Leases
            http = self._admin_http()
            for node in self.node_names:
                status, body = http.request(
                    "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
                )
                if status not in (200, 404):
                    raise errors.ControlPlaneError(f"deleting node {node}'s Lease: HTTP {status} {body[:200]!r}")
        for name in names:
            self._start(name, args[name]())
        for name in names:
            self._wait_https_healthz(name)

    # ---------------------------------------------------------------- clients

    @property
    def authority(self) -> pki.Pki:
        """The throw-away CA, to issue certificates for more clients (a real node's kubelet)."""
        if self._config is None:
            raise errors.ControlPlaneError("control plane not started")
        return self._config.credentials.authority

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` with admin credentials; close it when done."""
        from kubernetes import client as kube_client

        if self._config is None:
            raise errors.ControlPlaneError("control plane not started")
        credentials = self._config.credentials
        configuration = kube_client.Configuration(
            host=self.server_url,
            ssl_ca_cert=str(credentials.authority.ca.cert),
            cert_file=str(credentials.admin.cert),
            key_file=str(credentials.admin.key),
        )
        return kube_client.ApiClient(configuration)

    def _admin_http(self) -> network.Https:
        if self._config is None:
            raise errors.ControlPlaneError("control plane not started")
        credentials = self._config.credentials
        return network.Https(self.port("kube-apiserver"), credentials.authority.ca.cert, credentials.admin)

    # ---------------------------------------------------------------- nodes

    def node_manifest(self, name: str) -> dict[str, Any]:
        """The Node object created for a kwok node: kwok annotation, labels, resources."""
        return nodes.manifest(
            name,
            cpu=self.node_cpu,
            memory=self.node_memory,
            pods=self.node_pods,
            labels=self.node_labels,
        )

    def add_nodes(
        self,
        count: int,
        *,
        prefix: str | None = None,
        wait: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """Create ``count`` more kwok nodes (continuing the numbering) and await them Ready."""
        prefix = prefix or self.node_prefix
        http = self._admin_http()
        names = nodes.next_names(prefix, count, set(self.node_names))
        nodes.create(http, [self.node_manifest(name) for name in names])
        self.node_names.extend(names)
        if wait:
            self.wait_for_nodes_ready(names, timeout=timeout)
        return names

    def wait_for_nodes_ready(self, names: Iterable[str], timeout: float = 120.0) -> float:
        """Wait until kwok reports every named node Ready; returns the seconds waited."""
        wanted = set(names)
        began = time.monotonic()
        http = self._admin_http()

        self._wait_for(
            lambda: wanted <= nodes.ready_names(http),
            f"{len(wanted)} kwok node(s) Ready",
            "kwok",
            timeout=timeout,
            interval=0.2,
        )
        return time.monotonic() - began

    # ---------------------------------------------------------------- internals

    def _binary(self, name: str) -> str:
        directory = self.kubernetes_bin_dir if self.kubernetes_bin_dir and name in targets.OLDEST else self.bin_dir
        if directory is None:
            raise errors.ControlPlaneError("no binaries")
        path = directory / name
        if not path.is_file():
            raise errors.ControlPlaneError(f"missing binary {path}; run `python -m metax_dev.controlplane build`")
        return str(path)

    def _start(self, name: str, args: Sequence[str]) -> processes.Process:
        process = processes.Process(name, [self._binary(name), *args], self.log_path(name))
        self._processes[name] = process
        process.start()
        return process

    def _wait_apiserver_ready(self, timeout: float | None = None) -> None:
        http = self._admin_http()
        self._wait_for(
            lambda: http.ok("/readyz"),
            "kube-apiserver /readyz",
            "kube-apiserver",
            timeout=timeout or self.startup_timeout,
            interval=0.1,
        )

    def _wait_https_healthz(self, component: str) -> None:
        assert self._config is not None
        ca = self._config.credentials.authority.ca.cert
        http = network.Https(self.port(component), ca, None)
        self._wait_for(lambda: http.ok("/healthz"), f"{component} /healthz", component)

    def _wait_for(
        self,
        predicate: Callable[[], bool],
        what: str,
        component: str,
        *,
        timeout: float | None = None,
        interval: float = 0.25,
    ) -> None:
        """Poll ``predicate``; fail with the component's log tail if it dies or times out."""
        processes.wait_for(
            predicate,
            what,
            processes=self._processes,
            log_path=self.log_path(component),
            timeout=timeout or self.startup_timeout,
            interval=interval,
        )
