"""maca's round: payload images → `sdk.plan` → install / remove on the host → labels, Events, readiness.

Each round (every ``METAX_MACA_INTERVAL``, and at once when its Node changes): clean what an interrupted round
left (`SdkStore.clean`), read which versions the payload images bring (`sdk.wanted`, from their tags),
which are installed, and which live containers use which (the edit service's records, a record whose
container is gone is removed); install what is missing (hidden copy + rename), remove what is no longer listed
and not in use (the removal protocol of `metax_core.runtime.sdk`), and publish: the label
``metax-tech.com/gpu.maca.version`` (newest) and the annotation ``metax-tech.com/maca.versions`` (all), the
readiness signal ``maca`` (ready when every listed version is installed) and the probe file. A steady node
sees no write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from metax_core import components
from metax_core.errors import ClusterError, HardwareError, InvalidSpec
from metax_core.node import labels
from metax_core.ports import node as node_ports
from metax_core.runtime import sdk
from metax_core.wire import event_reasons
from metax_hw import sdk_store
from services._agent import base, cluster, loop
from services._agent import uninstall as agent_uninstall
from services.maca import undo
from services.maca.config import Settings

log = logging.getLogger(__name__)

COMPONENT = components.signal(components.Component.MACA)


class Maca(base.NodeAgentBase):
    name = "maca"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: node_ports.SdkStore | None = None,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.store: node_ports.SdkStore = hw or production_store(settings)
        self.failures = 0
        self._warned: dict[str, str] = {}

    def warn_once(self, reason: str, message: str) -> None:
        """A Warning Event when the problem is new or another one: a round that fails the same way again
        writes nothing (quiet while an administrator fixes the payload)."""
        if self._warned.get(reason) != message:
            self._warned[reason] = message
            self.publisher.event(reason, message, warning=True)

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        node = self.publisher.node_or_none(self.say)
        uid = self.uninstalling.check(node)
        if uid is not None:
            self.uninstall(node, uid)
            return
        try:
            ready, reason = self.converge()
        except HardwareError as exc:
            self.failures += 1
            ready, reason = False, str(exc)
            self.say("round", f"MXMACA: {reason}", logging.ERROR)
            self.warn_once(event_reasons.MACA_INSTALL_FAILED, reason)
            self.chores.later("sync", loop.backoff(self.failures))
        installed = [str(v) for v in self.store.installed()]
        self.publish(node, installed, ready)
        self.publisher.signal(ready, reason, version=installed[0] if installed else None)
        self.probe.report(ready, reason)

    def converge(self) -> tuple[bool, str]:
        for done in self.store.clean():
            self.say("clean", f"MXMACA: {done} (left by an interrupted round)")
        try:
            wanted = sdk.wanted(
                self.settings.payload_images,
                [str(self.settings.payload_dir / str(i)) for i in range(len(self.settings.payload_images))],
            )
        except InvalidSpec as exc:
            why = "; ".join(f"{e.path}: {e.message}" for e in exc.errors)
            self.warn_once(event_reasons.INVALID_MACA_PAYLOAD, why)
            return False, f"cannot install the payload images: {why}"
        live, gone = self.store.uses()
        self.store.forget(gone)
        todo = sdk.plan(wanted, self.store.installed(), live)
        for want in todo.install:
            self.store.install(want)
            self.publisher.event(event_reasons.MACA_INSTALLED, f"MXMACA {want.version} installed from {want.image}")
        for version in todo.remove:
            if self.store.remove(version):
                self.publisher.event(event_reasons.MACA_REMOVED, f"MXMACA {version} removed (no longer listed)")
        for version, users in todo.kept.items():
            self.say(
                f"kept-{version}", f"MXMACA {version} is no longer listed; kept while {len(users)} container(s) use it"
            )
        self.failures = 0
        self._warned.clear()
        shown = ", ".join(str(w.version) for w in wanted) or "none listed"
        return True, f"MXMACA installed: {shown}"

    def publish(self, node: Mapping[str, Any] | None, installed: list[str], ready: bool) -> None:
        if node is None:
            return
        label, annotation = labels.maca_metadata(installed, ready)
        try:
            self.publisher.metadata(node, labels=label, annotations=annotation)
        except ClusterError as exc:
            self.say("publish", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)

    def uninstall(self, node: Mapping[str, Any] | None, uid: str) -> None:
        self.probe.not_ready()
        kept = undo.undo(self.store)
        label, annotation = labels.maca_metadata(())
        if node is not None:
            try:
                self.publisher.metadata(node, labels=label)
            except ClusterError as exc:
                self.say("uninstall-labels", f"cannot remove the MXMACA label: {exc}", logging.WARNING)
        if agent_uninstall.answer(self.publisher, node, COMPONENT, uid, kept=kept, annotations=list(annotation)):
            self.say("uninstall", f"uninstall: MXMACA versions removed{f', kept: {kept}' if kept else ''}")
        agent_uninstall.remove_ready_dir(self.settings.host_root)

    def shutdown(self) -> None:
        """Installed versions stay (containers use them); uninstall removes them."""
        self.probe.not_ready()
        log.info("maca stopped")


def production_store(settings: Settings) -> sdk_store.HostSdkStore:
    return sdk_store.HostSdkStore(
        settings.host_path(settings.sdk_dir), settings.host_path(settings.in_use_dir), settings.state_root
    )
