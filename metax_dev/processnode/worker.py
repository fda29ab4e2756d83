"""One pod on a process node: its containers as process groups, probes, restarts, status, graceful deletion.

Why a module of its own: this is the kubelet's pod worker in small. One thread per pod owns the pod's
processes from start to removal: it starts each container's command (through ``setpriv --pdeathsig KILL``, in
a session of its own, so a container dies with the thread that started it and its whole group can be
signalled), runs the probes when they are due, restarts by the pod's restartPolicy with a back-off, keeps the
ServiceAccount token fresh, writes the status whenever it changes, and on deletion sends SIGTERM, waits the
grace period, sends SIGKILL and finishes the deletion with grace 0.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from metax_core.errors import ClusterError, NotFound
from metax_dev.controlplane import network
from metax_dev.processnode import container, podspec, probes, standins, status, tokens
from metax_k8s import client

log = logging.getLogger(__name__)

FIELD_MANAGER = "metax-processnode"
TICK = 0.2


@attrs.frozen
class NodeContext:
    """What every pod worker of one node shares."""

    name: str
    address: str
    api: client.HttpApi  # as system:node:<name>
    http: network.Https  # the same identity, for TokenRequest and delete-with-grace-0
    ca: Path
    server_port: int
    bin_dirs: tuple[Path, ...]
    root: Path
    stand_ins: standins.StandIns | None = None
    """What stands in for images and the host when the node stands for a GPU node (`standins`)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class PodWorker:
    def __init__(self, context: NodeContext, pod: Mapping[str, Any]) -> None:
        self.context = context
        meta = pod["metadata"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self.uid: str = meta["uid"]
        self.directory = context.root / f"{meta['namespace']}_{meta['name']}_{self.uid[:8]}"
        self.account_dir = self.directory / "serviceaccount"
        self._pod: Mapping[str, Any] = pod
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._removed = False
        self._token: tokens.Token | None = None
        self._token_error = ""
        self._token_retry = 0.0
        self._renew_now = False
        self._published: dict[str, Any] | None = None
        self._conditions: dict[str, bool] = {}
        self._transitions: dict[str, str] = {}
        self._start_time = status.timestamp(_now())
        self.containers = [container.Container(c) for c in (pod.get("spec") or {}).get("containers") or []]
        self.init_containers = [container.Container(c) for c in (pod.get("spec") or {}).get("initContainers") or []]
        self._initialized = not self.init_containers
        self.thread = threading.Thread(target=self._run, name=f"pod {self.key}", daemon=True)

    # -- what the node calls ---------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def update(self, pod: Mapping[str, Any]) -> None:
        self._pod = pod
        self._wake.set()

    def removed(self) -> None:
        """The pod object is gone: stop its processes at once (as the kubelet does for a force deletion)."""
        self._removed = True
        self._stop.set()
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Node shutdown: stop the processes (SIGTERM, then SIGKILL after a short grace) and the thread."""
        self._stop.set()
        self._wake.set()
        self.thread.join(timeout)

    def renew_token(self) -> None:
        """Ask for a new ServiceAccount token now instead of at 80 % of the current one's lifetime."""
        self._renew_now = True
        self._wake.set()

    def log_path(self, container: str) -> Path:
        return self.directory / f"{container}.log"

    # -- the loop ------------------------------------------------------------------------------------

    @property
    def _restart_policy(self) -> str:
        return str((self._pod.get("spec") or {}).get("restartPolicy") or "Always")

    def _run(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            reason = podspec.unsupported(self._pod, self.context.stand_ins)
            if reason is not None:
                for c in self.containers:
                    c.state, c.reason, c.message, c.will_restart = status.State.WAITING, "Unsupported", reason, False
                self._publish(status.Phase.FAILED, "UnsupportedPodSpec", reason)
            while not self._stop.is_set():
                if (self._pod.get("metadata") or {}).get("deletionTimestamp"):
                    self._delete()
                    return
                if reason is None:
                    self._refresh_token()
                    if not self._initialized:
                        reason = self._step_init()
                    if self._initialized:
                        for c in self.containers:
                            self._step(c)
                    if reason is None:
                        self._publish(status.phase([c.snapshot() for c in self.containers]))
                self._wake.wait(TICK)
                self._wake.clear()
        except Exception:
            log.exception("pod %s: worker failed", self.key)
        finally:
            self._kill_all(grace=0.0 if self._removed else 5.0)
            for c in self.containers + self.init_containers:
                if c.log is not None:
                    c.log.close()

    # -- credentials -----------------------------------------------------------------------------------

    def _wants_token(self) -> bool:
        """Whether any container gets the pod's ServiceAccount token: the kubelet's automount, or a projected
        volume with a ``serviceAccountToken`` source (`metax_core.cluster.pod_security`)."""
        spec = self._pod.get("spec") or {}
        return spec.get("automountServiceAccountToken") is not False or bool(self._token_volumes())

    def _token_volumes(self) -> set[str]:
        spec = self._pod.get("spec") or {}
        return {
            v["name"]
            for v in spec.get("volumes") or []
            if any("serviceAccountToken" in source for source in (v.get("projected") or {}).get("sources") or [])
        }

    def _holds_token(self, spec: Mapping[str, Any]) -> bool:
        """Whether container ``spec`` sees the token: the pod automounts it, or the container mounts its volume."""
        if (self._pod.get("spec") or {}).get("automountServiceAccountToken") is not False:
            return True
        volumes = self._token_volumes()
        return any(m.get("name") in volumes for m in spec.get("volumeMounts") or [])

    def _refresh_token(self) -> None:
        if not self._wants_token():
            return
        now = _now()
        if self._token is not None and not self._token.renew_due(now) and not self._renew_now:
            return
        if time.monotonic() < self._token_retry:
            return
        try:
            token = tokens.request(self.context.http, self._pod, now)
            tokens.write(self.account_dir, token, self.context.ca, self._pod["metadata"]["namespace"])
        except (tokens.TokenError, OSError) as exc:
            self._token_error = str(exc)
            self._token_retry = time.monotonic() + 2.0
            log.warning("pod %s: %s", self.key, exc)
            return
        self._token, self._token_error, self._renew_now = token, "", False

    def _base_env(self, spec: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The environment every container gets; the token's directory only for ``spec`` (a container) that holds
        the token (`_holds_token`; None: the pod's automount alone decides)."""
        meta = self._pod["metadata"]
        tools = self.context.stand_ins.tool_dirs if self.context.stand_ins is not None else ()
        path = [
            *(str(d) for d in tools),
            *(str(d) for d in self.context.bin_dirs),
            "/usr/local/bin",
            "/usr/bin",
            "/bin",
        ]
        env = {
            "PATH": ":".join(path),
            "HOME": str(self.directory),
            "HOSTNAME": meta["name"],
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "KUBERNETES_SERVICE_HOST": network.LOOPBACK,
            "KUBERNETES_SERVICE_PORT": str(self.context.server_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.context.server_port),
        }
        holds = self._holds_token(spec) if spec is not None else self._wants_token()
        if holds:
            env[client.SERVICE_ACCOUNT_DIR_ENV] = str(self.account_dir)
        tmp = self._volume_dirs().get("/tmp")
        if tmp is None and self.context.stand_ins is not None:
            tmp = self.directory / "tmp"  # the pod's own /tmp (`standins.path_map`)
        if tmp is not None:
            env["TMPDIR"] = str(tmp)
        return env

    def _volume_dirs(self) -> dict[str, Path]:
        """emptyDir volumes by mount path: a directory of the pod (nothing is mounted; /tmp becomes TMPDIR)."""
        spec = self._pod.get("spec") or {}
        empty = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
        found = {}
        for entry in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            for mount in entry.get("volumeMounts") or []:
                if mount["name"] in empty:
                    found[mount["mountPath"]] = self.directory / "volumes" / mount["name"]
        return found

    def _lookup(self, kind: str, name: str, key: str) -> str:
        namespace = self._pod["metadata"]["namespace"]
        try:
            obj = self.context.api.get("v1", kind, name, namespace)
        except NotFound as exc:
            raise KeyError(f"{kind} {namespace}/{name} not found") from exc
        if kind == "Secret":
            data = obj.get("data") or {}
            if key not in data:
                raise KeyError(f"no key {key!r}")
            return base64.b64decode(data[key]).decode()
        values = obj.get("data") or {}
        if key not in values:
            raise KeyError(f"no key {key!r}")
        return str(values[key])

    # -- one container -----------------------------------------------------------------------------------

    def _step(self, c: container.Container) -> None:
        now = time.monotonic()
        if c.popen is not None:
            code = c.popen.poll()
            if code is None:
                self._probe(c, now)
                return
            self._exited(c, code, "Completed" if code == 0 else "Error", "")
        if not c.will_restart or now < c.next_start:
            return
        if self._token is None and self._token_error:
            c.state, c.reason, c.message = status.State.WAITING, "CreateContainerConfigError", self._token_error
            return
        if self._token is None and self._wants_token():
            return  # the first TokenRequest has not answered yet
        self._start(c)

    def _step_init(self) -> str | None:
        """Run the init containers in order, each to exit code 0 (a failed one again after a back-off, or the
        pod Failed under restartPolicy Never); sets `_initialized` when all have. Returns why the pod failed."""
        for c in self.init_containers:
            if c.state is status.State.TERMINATED and c.terminated is not None and c.terminated.exit_code == 0:
                continue
            if c.popen is not None:
                code = c.popen.poll()
                if code is None:
                    return None
                self._init_exited(c, code)
            elif c.terminated is not None and c.terminated.exit_code != 0 and not c.will_restart:
                return self._init_failed(c)
            elif time.monotonic() >= c.next_start and self._may_start():
                self._start(c)  # a StartError is recorded by `_exited` under the pod's restartPolicy
            if c.state is not status.State.TERMINATED or c.terminated is None or c.terminated.exit_code != 0:
                return self._init_failed(c) if c.terminated is not None and not c.will_restart else None
        self._initialized = True
        return None

    def _may_start(self) -> bool:
        if self._token is None and self._token_error:
            return False
        return not (self._token is None and self._wants_token())

    def _init_exited(self, c: container.Container, code: int) -> None:
        c.terminated = status.Terminated(
            code, "Completed" if code == 0 else "Error", "", c.started_at, status.timestamp(_now())
        )
        c.popen, c.ready = None, False
        if code == 0:
            c.state, c.will_restart = status.State.TERMINATED, False
            log.info("pod %s: init container %s completed", self.key, c.name)
            return
        c.will_restart = self._restart_policy != "Never"
        c.state = status.State.WAITING if c.will_restart else status.State.TERMINATED
        c.reason = "CrashLoopBackOff"
        c.next_start = time.monotonic() + c.backoff
        c.backoff = min(c.backoff * 2, container.BACKOFF_MAX)
        c.restart_count += 1
        log.info("pod %s: init container %s exited %d", self.key, c.name, code)

    def _init_failed(self, c: container.Container) -> str:
        reason = f"init container {c.name} failed (exit code {c.terminated.exit_code if c.terminated else '?'})"
        self._publish(status.Phase.FAILED, "InitContainerFailed", reason)
        return reason

    def _start(self, c: container.Container) -> None:
        facts = podspec.PodFacts(self.context.name, self.context.address, self.context.address)
        stand_ins = self.context.stand_ins
        paths = standins.path_map(self._pod, c.spec, self.directory, stand_ins)
        try:
            c.plan = podspec.plan(c.spec, self._pod, facts, self.context.bin_dirs, self._lookup, paths, stand_ins)
        except podspec.PlanError as exc:
            if exc.reason == "StartError":  # as the runtime reports an exec failure: exit code 128
                self._mark_started(c)
                self._exited(c, 128, exc.reason, exc.message)
            else:
                c.state, c.reason, c.message = status.State.WAITING, exc.reason, exc.message
                c.next_start = time.monotonic() + 2.0
            return
        for directory in self._volume_dirs().values():
            directory.mkdir(parents=True, exist_ok=True)
        if stand_ins is not None:
            (self.directory / "tmp").mkdir(exist_ok=True)
        if c.log is None:
            c.log = self.log_path(c.name).open("ab")
        c.log.write(f"==> {status.timestamp(_now())} start #{c.restart_count}: {' '.join(c.plan.argv)}\n".encode())
        c.log.flush()
        env = {**self._base_env(c.spec), **c.plan.env}
        try:
            c.popen = container.start_process(c.plan.argv, c.log, self.directory, env)
        except OSError as exc:
            self._mark_started(c)
            self._exited(c, 128, "StartError", f"{c.plan.argv[0]}: {exc}")
            return
        self._mark_started(c)
        c.state, c.reason, c.message = status.State.RUNNING, "", ""
        c.ready = c.plan.readiness is None
        c.probe_next = {"readiness": c.started_mono + (c.plan.readiness.initial_delay if c.plan.readiness else 0)}
        c.probe_next["liveness"] = c.started_mono + (c.plan.liveness.initial_delay if c.plan.liveness else 0)
        c.probe_ok, c.probe_bad = {}, {}
        log.info("pod %s: container %s started (pid %d)", self.key, c.name, c.popen.pid)

    def _mark_started(self, c: container.Container) -> None:
        c.started_at = status.timestamp(_now())
        c.started_mono = time.monotonic()

    def _exited(self, c: container.Container, code: int, reason: str, message: str) -> None:
        c.terminated = status.Terminated(code, reason, message, c.started_at, status.timestamp(_now()))
        c.ready = False
        c.popen = None
        policy = self._restart_policy
        c.will_restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if c.will_restart:
            if time.monotonic() - c.started_mono > container.BACKOFF_RESET:
                c.backoff = container.BACKOFF_FIRST
            c.next_start = time.monotonic() + c.backoff
            c.backoff = min(c.backoff * 2, container.BACKOFF_MAX)
            c.restart_count += 1
            c.state, c.reason = status.State.WAITING, "CrashLoopBackOff"
            c.message = f"back-off {c.next_start - time.monotonic():.0f}s restarting failed container {c.name}"
        else:
            c.state, c.reason, c.message = status.State.TERMINATED, "", ""
        log.info("pod %s: container %s exited %d (%s)", self.key, c.name, code, reason)

    def _probe(self, c: container.Container, now: float) -> None:
        assert c.plan is not None
        for kind, probe in (("readiness", c.plan.readiness), ("liveness", c.plan.liveness)):
            if probe is None or now < c.probe_next[kind]:
                continue
            result = probes.run(probe, self.context.address, {**self._base_env(c.spec), **c.plan.env}, self.directory)
            c.probe_next[kind] = time.monotonic() + probe.period
            if result.success:
                c.probe_ok[kind], c.probe_bad[kind] = c.probe_ok.get(kind, 0) + 1, 0
            else:
                c.probe_ok[kind], c.probe_bad[kind] = 0, c.probe_bad.get(kind, 0) + 1
            if kind == "readiness":
                if c.probe_ok[kind] >= probe.success_threshold:
                    c.ready = True
                elif c.probe_bad[kind] >= probe.failure_threshold:
                    c.ready = False
            elif c.probe_bad[kind] >= probe.failure_threshold:
                log.info("pod %s: container %s failed liveness (%s): restarting", self.key, c.name, result.detail)
                assert c.popen is not None  # probed: it runs
                code = container.stop_process(c.popen, self._grace())
                self._exited(c, code, "Error", f"liveness probe failed: {result.detail}")
                return

    # -- stopping ------------------------------------------------------------------------------------------

    def _grace(self) -> float:
        meta = self._pod.get("metadata") or {}
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float((self._pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    def _kill_all(self, grace: float) -> None:
        running = [c for c in self.containers + self.init_containers if c.popen is not None]
        for c in running:
            assert c.popen is not None
            container.signal_group(c.popen, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for c in running:
            assert c.popen is not None
            code = container.stop_process(c.popen, max(0.0, deadline - time.monotonic()))
            c.terminated = status.Terminated(
                code, "Error" if code else "Completed", "", c.started_at, status.timestamp(_now())
            )
            c.state, c.ready, c.popen, c.will_restart = status.State.TERMINATED, False, None, False

    def _delete(self) -> None:
        """Graceful deletion: stop every container within the grace period, then remove the pod for good."""
        self._kill_all(self._grace())
        meta = self._pod["metadata"]
        with contextlib.suppress(ClusterError):
            self._publish(status.phase([c.snapshot() for c in self.containers]))
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        try:
            code, data = self.context.http.request(
                "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body
            )
        except OSError as exc:
            log.warning("pod %s: final delete failed: %s", self.key, exc)
            return
        if code >= 300 and code not in (404, 409):
            log.warning("pod %s: final delete: HTTP %d %r", self.key, code, data[:300])

    # -- status --------------------------------------------------------------------------------------------

    def _publish(self, phase: status.Phase, reason: str = "", message: str = "") -> None:
        snapshot = status.PodStatus(
            phase=phase,
            containers=tuple(c.snapshot() for c in self.containers),
            pod_ip=self.context.address,
            host_ip=self.context.address,
            start_time=self._start_time,
            initialized=self._initialized,
            reason=reason,
            message=message,
        )
        now = status.timestamp(_now())
        for kind, value in status.conditions(snapshot).items():
            if self._conditions.get(kind) != value:
                self._conditions[kind] = value
                self._transitions[kind] = now
        document = status.document(attrs.evolve(snapshot, transitions=dict(self._transitions)))
        if document == self._published:
            return
        meta = self._pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": self.uid},
            "status": document,
        }
        try:
            self.context.api.apply(body, field_manager=FIELD_MANAGER, force=True, subresource="status")
        except ClusterError as exc:
            log.warning("pod %s: status not written: %s", self.key, exc)
            return
        self._published = document
