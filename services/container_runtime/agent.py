"""container-runtime's round (C4, R-READY): detect the runtime → install the wrapper → configure → publish.

Every round (``METAX_RUNTIME_INTERVAL``, and at once when its Node changes or a runtime file it wrote is
changed by someone else: the files' stat is looked at every tick) it detects the node's runtime from the
host (`metax_core.runtime.detect`: which socket exists, the host binary's ``--version``), installs the
wrapper from the image to ``<toolkit>/metax-container-runtime`` (atomic) with its settings beside it
(``.conf``: runc and the edit socket, `metax_core.runtime.wrapper_conf`), and runs the runtime's round
(`containerd_round`, `docker_round`, `crio_round`). ``container-runtime`` is ready only while the **running**
daemon reports the ``metax`` handler running the wrapper — not when the files are merely written.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core import components
from metax_core.errors import ClusterError, HardwareError, InvalidSpec
from metax_core.node import labels
from metax_core.ports import node as node_ports
from metax_core.runtime import crio, detect, handler, record, wrapper_conf
from metax_core.spec.fieldtypes import RestartMode
from metax_core.wire import event_reasons
from metax_hw import container_runtime, runtime_files
from services._agent import base, cluster
from services._agent import uninstall as agent_uninstall
from services.container_runtime import containerd_round, crio_round, docker_round, rounds
from services.container_runtime.config import RuntimeChoice, Settings

log = logging.getLogger(__name__)

COMPONENT = components.signal(components.Component.RUNTIME)


@attrs.frozen
class Hardware:
    """The host programs and the runtime's service manager."""

    program: container_runtime.HostProgram
    service: node_ports.ServiceManager


class ContainerRuntime(base.NodeAgentBase):
    name = "container-runtime"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self.files: node_ports.RuntimeFiles = runtime_files.HostFiles(settings.host_root)
        self.ledger = runtime_files.Ledger(self.files, f"{settings.state_dir.rstrip('/')}/{record.FILE_NAME}")
        common: dict[str, Any] = {
            "files_": self.files,
            "ledger": self.ledger,
            "wrapper": settings.wrapper_host_path,
            "restart_wait": settings.restart_wait,
            "event": self._event,
            "sleep": sleep,
            "clock": clock,
        }
        containerd_socket = self.socket(detect.RuntimeKind.CONTAINERD)
        self.containerd = containerd_round.ContainerdRound(
            host=container_runtime.Containerd(hw.program, binary=settings.containerd_binary, socket=containerd_socket),
            root_path=settings.containerd_config,
            service=self._restarter(detect.RuntimeKind.CONTAINERD, clock, sleep),
            **common,
        )
        self.docker = docker_round.DockerRound(
            host=container_runtime.Dockerd(
                hw.program, binary=settings.docker_binary, socket=self.socket(detect.RuntimeKind.DOCKER)
            ),
            config_path=settings.docker_config,
            service=self._restarter(detect.RuntimeKind.DOCKER, clock, sleep),
            **common,
        )
        self.crio = crio_round.CrioRound(
            host=container_runtime.Crio(
                hw.program, binary=settings.crio_binary, socket=self.socket(detect.RuntimeKind.CRIO)
            ),
            config_path=settings.crio_config,
            config_dir=settings.crio_config_dir,
            service=self._restarter(detect.RuntimeKind.CRIO, clock, sleep),
            **common,
        )
        self.rounds: dict[detect.RuntimeKind, rounds.RuntimeRound] = {
            detect.RuntimeKind.CONTAINERD: self.containerd,
            detect.RuntimeKind.DOCKER: self.docker,
            detect.RuntimeKind.CRIO: self.crio,
        }
        for each in self.rounds.values():
            each.unit = settings.service or each.unit
        self._undone: str | None = None
        """The uninstall request this agent has completely undone (nothing kept): later rounds only answer."""
        self._kept: list[str] = []
        self.detected: detect.Detected | None = None
        self._stamp: tuple[Any, ...] | None = None

    def _restarter(
        self, kind: detect.RuntimeKind, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> node_ports.ServiceManager | None:
        """What restarts runtime ``kind`` in the configured restart mode (None: nothing, mode ``none``)."""
        mode = self.settings.restart_mode
        if mode is RestartMode.NONE:
            return None
        if mode is RestartMode.SYSTEMD:
            return self.hw.service
        program, signum = container_runtime.DAEMONS[kind.value]
        return container_runtime.SignalRestart(
            self.socket(kind), program, signum=signum, exit_wait=self.settings.restart_wait, sleep=sleep, clock=clock
        )

    # -- the loop --------------------------------------------------------------------------------------------

    def tick(self) -> None:
        stamp = self._files_stamp()
        if stamp != self._stamp and self._stamp is not None:
            self.chores.soon("sync")  # a runtime file changed behind us (config management): look now
        if not self.chores.due("sync", self.settings.interval):
            return
        node = self.publisher.node_or_none(self.say)
        try:
            if self.uninstall(node):
                return
            ready, reason = self.sync()
        except HardwareError as exc:
            self.say("sync", f"container runtime: {exc}", logging.WARNING)
            ready, reason = False, str(exc)
        self._stamp = self._files_stamp()
        self.say("ready", f"{'ready' if ready else 'not ready'}: {reason}")
        self.publisher.signal(ready, reason, version=self.detected.text if self.detected else None)
        self._label(node, ready)
        self.probe.report(ready, reason)

    def _label(self, node: Mapping[str, Any] | None, ready: bool) -> None:
        """`labels.RUNTIME_READY` on the node while ready (written only when it changes)."""
        if node is None:
            return
        try:
            self.publisher.metadata(node, labels=labels.ready_label(labels.RUNTIME_READY, ready))
        except ClusterError as exc:
            self.say("label", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)

    def shutdown(self) -> None:
        """The configuration stays (containers keep starting through it); only uninstall takes it away."""
        self.probe.not_ready()
        log.info("container-runtime stopped")

    def _event(self, reason: str, message: str, warning: bool) -> None:
        if self.say(f"event:{reason}", message, logging.WARNING if warning else logging.INFO):
            try:
                self.publisher.event(reason, message, warning=warning)
            except ClusterError as exc:
                log.warning("cannot send Event %s: %s", reason, exc)

    def _files_stamp(self) -> tuple[Any, ...]:
        return tuple(
            self.files.stamp(path) for path in dict.fromkeys(p for r in self.rounds.values() for p in r.watched)
        )

    # -- the round -------------------------------------------------------------------------------------------

    def socket(self, kind: detect.RuntimeKind) -> str:
        """The runtime's socket as this process opens it (through the host's root when in a pod)."""
        path = self.settings.runtime_socket or detect.SOCKETS[kind]
        if self.settings.host_namespaces:
            return container_runtime.PROC_ROOT + path
        return str(self.settings.host_path(path))

    def detect(self) -> detect.Detected:
        choice = self.settings.runtime
        kinds = list(detect.RuntimeKind) if choice is RuntimeChoice.AUTO else [detect.RuntimeKind(choice.value)]
        sockets = {k: os.path.exists(self.socket(k)) for k in kinds}
        versions: dict[detect.RuntimeKind, str] = {}
        for kind, present in sockets.items():
            if present and (text := self.rounds[kind].version_output()) is not None:
                versions[kind] = text
        where = {k: self.settings.runtime_socket or detect.SOCKETS[k] for k in kinds}
        return detect.detect(sockets, versions, where)

    def sync(self) -> tuple[bool, str]:
        try:
            found = self.detect()
            self.detected = found
            context: Any = found.version
            if found.kind is detect.RuntimeKind.CONTAINERD:
                context = detect.containerd_schema(found.version)
            elif found.kind is detect.RuntimeKind.CRIO:
                crio.check_version(found.version)
        except InvalidSpec as exc:
            what = self.detected.text if self.detected else "no runtime"
            message = f"{what}: {exc}"
            self._event(event_reasons.RUNTIME_UNSUPPORTED, message, True)
            return False, message
        self.say("detected", f"node runtime: {found.text}")
        self._install_wrapper()
        outcome = self.rounds[found.kind].run(context, ".".join(map(str, found.version)))
        return outcome.ready, outcome.reason

    def _install_wrapper(self) -> None:
        s = self.settings
        self.files.clean_partials(s.toolkit_dir)
        if self.files.install_wrapper(s.wrapper_source, s.wrapper_host_path):
            log.info("installed the runtime wrapper at %s", s.wrapper_host_path)
        settings = wrapper_conf.WrapperConf(socket=s.edit_socket, runc=s.wrapper_runc)
        self.files.put(wrapper_conf.path_of(s.wrapper_host_path), wrapper_conf.render(settings, "the agent's settings"))

    # -- uninstall -------------------------------------------------------------------------------------------

    def _configured(self) -> rounds.RuntimeRound | None:
        """The round of the runtime the record names (what we configured), or None: nothing to undo."""
        rec = self.ledger.load()
        if rec is None:
            return None
        kind = next((k for k in self.rounds if k.value == rec.runtime), None)
        return self.rounds[kind] if kind is not None else None

    def _remove_wrapper(self, configured: rounds.RuntimeRound | None = None) -> list[str]:
        """The wrapper goes unless pods still run with the handler: their shims call it to stop and delete
        their containers, so it stays for them (and the answer says so)."""
        path = self.settings.wrapper_host_path
        try:
            running = (configured or self.containerd).sandboxes()
        except HardwareError as exc:
            running = []
            log.warning("cannot list the pods of runtime handler %s: %s", handler.RUNTIME_HANDLER, exc)
        if running:
            return [f"{path}: {len(running)} pod sandbox(es) still run with runtime handler {handler.RUNTIME_HANDLER}"]
        self.files.remove(path)
        self.files.remove(wrapper_conf.path_of(path))
        self.files.remove_dir_if_empty(self.settings.toolkit_dir)
        return []

    def uninstall(self, node: Mapping[str, Any] | None) -> bool:
        """When the finalizer asks (``node`` as just read): our drop-in and root edit undone, the runtime restarted
        once, the wrapper removed; then answer and do nothing else."""
        uid = self.uninstalling.check(node)
        if uid is None:
            return False
        self.probe.not_ready()
        if self._undone != uid:  # done once nothing is kept; what was kept (the wrapper) is tried each round
            configured = self._configured()
            kept = configured.uninstall() if configured is not None else []
            kept += self._remove_wrapper(configured)
            self._kept = kept
            if not kept:
                self._undone = uid
        kept = self._kept
        self.say("uninstall", "uninstall: runtime configuration restored" + (f", kept: {kept}" if kept else ""))
        agent_uninstall.answer(self.publisher, node, COMPONENT, uid, kept=kept, labels=[labels.RUNTIME_READY])
        agent_uninstall.remove_ready_dir(self.settings.host_root)
        return True
