"""dra-driver's loop and its answers to the kubelet (R-DRA, docs/dra.md).

Every round (healthy_interval, or at once when its Node changes): read the readiness signals, the PCI
functions, the GPUs' health and links and which devices device-plugin pods still hold, ask the core for the
published devices (`metax_core.dra.slices.published_devices`, nothing while a required component is not
ready, nothing a device-plugin pod holds: the switch from device plugin to DRA never offers a GPU twice),
and write the slices `slices.plan_slices` says — none when nothing changed. A device whose GPU is not fine
stays published with its device taint (`slices.taint_of`, NoSchedule) and loses it when the verdict clears;
when the API server is seen dropping a taint we wrote (device taints off), the driver says so once and withdraws
such devices instead from then on. The health reports of every device ever published go to the kubelet's
health stream, and the node's health report names the pods holding a GPU that is not fine (read from the
prepared claims only then).

The kubelet's calls come on gRPC threads (`metax_k8s.dra.server`) and are answered by the prepared claims
(`services.dra_driver.claims`: spec, then checkpoint, under one lock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from metax_core.dra import health, model, slices
from metax_core.dra import prepare as preparing
from metax_core.errors import ClusterError, HardwareError, PortError
from metax_core.health import verdict
from metax_core.inventory import VFIO_DRIVER, PciAddress, PciFunction
from metax_core.node import devices, readiness
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.wire import event_reasons
from services._agent import base, cluster
from services._agent import health as health_watch
from services.dra_driver import claims
from services.dra_driver.config import Settings

log = logging.getLogger(__name__)

COMPONENT = "dra-driver"
FIELD_MANAGER = f"metax-{COMPONENT}"
HeldDevices = Callable[[], Mapping[str, Sequence[str]]]


class Server(Protocol):
    """The kubelet-facing gRPC server (`metax_k8s.dra.server.DraPluginServer`)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


ServerFactory = Callable[["DraDriver"], Server]


@attrs.frozen
class Hardware:
    devices: hardware.DeviceInventory
    monitor: hardware.GpuMonitor
    topology: hardware.GpuTopology
    modules: hardware.KernelModules
    held: HeldDevices = dict
    """The kubelet's PodResources: resource name → device IDs pods hold (device-plugin pods)."""

    @classmethod
    def of(cls, host: Any, held: HeldDevices | None = None) -> Hardware:
        return cls(host.devices, host.monitor, host.monitor, host.modules, held or dict)


class DraDriver(base.NodeAgentBase):
    """The node agent; also the `ClaimPreparer` and `HealthFeed` its gRPC server asks."""

    name = COMPONENT

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        files: node_ports.ClaimStore,
        server_factory: ServerFactory,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        # Its own signal says whether the node's GPUs are published (doctor reads it); it reads the others'.
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self.board = board
        self.files = files
        self.server_factory = server_factory
        self.wall = wall
        self.server: Server | None = None
        self.claims = claims.PreparedClaims(settings, files=files, objects=ports.objects)
        self._known: dict[str, PciAddress] = {}
        self._present: frozenset[PciAddress] = frozenset()
        self._verdicts: dict[PciAddress, verdict.Verdict] = {}
        self._taints_served = True
        """False once the API server dropped a device taint we wrote: unhealthy devices are withdrawn instead."""
        self.health = health_watch.HealthWatch(
            COMPONENT,
            settings.node_name,
            monitor=hw.monitor,
            nodes=ports.nodes,
            events=ports.events,
            rules=settings.health_rules,
            wall=wall,
        )
        self._reports: tuple[model.DeviceHealthReport, ...] = ()
        self._version = 0
        self._changed = threading.Condition()

    # --- the loop -------------------------------------------------------------------------------------------

    def tick(self) -> None:
        if self.server is None:
            self.claims.load(self.say)
        if self.chores.due("sync", self.settings.healthy_interval):
            if self.uninstall():
                return
            self.sync()
        if self.server is None:
            self._start_server()

    def _start_server(self) -> None:
        server = self.server_factory(self)
        try:
            server.start()
        except (PortError, OSError) as exc:
            self.say("server", f"cannot serve the kubelet: {exc}", logging.ERROR)
            return
        self.server = server
        self.say("server", f"serving the kubelet at {self.settings.plugin_dir}")

    def shutdown(self) -> None:
        """Stop serving and withdraw the readiness signal: a driver that does not run is not ready. Nothing waits
        on this signal, and the pod may be going for good (its node switched to the device plugin, where no
        uninstall of this driver will run to remove it); its next start publishes it again. Slices and prepared
        claims stay (a restart picks them up)."""
        self.publisher.withdraw()
        if self.server is not None:
            self.server.stop()
            self.server = None
        with self._changed:
            self._version += 1  # wake health streams: they end with the server
            self._changed.notify_all()

    def uninstall(self) -> bool:
        """When the finalizer asks: withdraw the node's slices (nothing new lands here) and publish no more.
        Prepared claims stay until the kubelet unprepares them (their pods are being deleted)."""
        node = self.publisher.node_or_none(self.say)
        if self.uninstalling.check(node) is None:
            return False
        self._write_slices([], node)
        self.publisher.withdraw()
        self.probe.not_ready()
        self.say("uninstall", "uninstall asked: slices withdrawn, publishing no more")
        return True

    def sync(self) -> None:
        gathered = self._gather()
        if gathered is None:
            self.probe.not_ready()
            return
        facts = gathered
        wanted = slices.published_devices(facts)
        node = self.publisher.node_or_none(self.say)
        if node is None:
            self.probe.not_ready()
            return
        if not self._write_slices(wanted, node):
            self.probe.not_ready()
            return
        if facts.taints_served and not self._taints_served:  # the server dropped them: withdraw at once
            facts = attrs.evolve(facts, taints_served=False)
            wanted = slices.published_devices(facts)
            if not self._write_slices(wanted, node):
                self.probe.not_ready()
                return
        self._publish_health(facts)
        self.health.publish(facts.functions, self._holders(facts.functions))
        allowed = facts.may_publish
        reason = f"{len(wanted)} device(s) published" if allowed else "waiting for the required components"
        self.publisher.signal(allowed, reason)
        self.probe.ready(reason)

    def _gather(self) -> slices.NodeFacts | None:
        signals = self.board.read_all() if self.board is not None and self.settings.required_components else {}
        decision = readiness.decide(self.settings.required_components, signals)
        self.say("readiness", f"publishing allowed: {decision.may_advertise} ({decision.reason})")
        try:
            functions = tuple(self.hw.devices.functions())
            iommu = self.hw.devices.iommu_enabled()
            nodes = {f.address: self._nodes_of(f) for f in functions}
        except HardwareError as exc:
            self.say("inventory", f"cannot read the GPU inventory, keeping what is published: {exc}", logging.WARNING)
            return None
        metrics: tuple[Any, ...] = ()
        links: tuple[Any, ...] = ()
        self.health.read(functions)  # R-HEALTH: a failed reading is unknown, the verdicts stay
        if self.health.recheck:
            self.chores.later("sync", self.health.rules.recheck_after(self.settings.healthy_interval))
        self._verdicts = self.health.verdicts(functions)
        try:
            metrics = tuple(self.hw.monitor.metrics())
            links = tuple(self.hw.topology.links())
            self.say("smi", "mx-smi answers")
        except HardwareError as exc:
            self.say("smi", f"mx-smi failed: {exc}", logging.WARNING)
        version = None
        try:
            state = self.hw.modules.state("metax")
            version = state.version if state is not None else None
        except HardwareError as exc:
            self.say("module", f"cannot read the driver version: {exc}", logging.WARNING)
        held: set[PciAddress] = set()
        try:
            held = devices.held_gpus(self.hw.held(), functions)
            self.say("held", f"device-plugin pods hold {len(held)} GPU(s)")
        except (PortError, HardwareError) as exc:
            # Unknown: publish nothing new that could be held (keep what is published).
            self.say(
                "held", f"kubelet's PodResources does not answer, keeping what is published: {exc}", logging.WARNING
            )
            return None
        self.claims.device_nodes = nodes
        self._present = frozenset(f.address for f in functions)
        facts = slices.NodeFacts(
            self.settings.node_name,
            functions,
            iommu_enabled=iommu,
            verdicts=self._verdicts,
            metrics=metrics,
            links=links,
            driver_version=version,
            may_publish=decision.may_advertise,
            held=frozenset(held),
            taints_served=self._taints_served,
        )
        return facts

    def _nodes_of(self, function: PciFunction) -> tuple[str, ...]:
        if function.driver == VFIO_DRIVER:
            group = function.iommu_group
            return devices.vfio_nodes([group]) if group is not None else ()
        if not devices.is_native(function):
            return ()
        return tuple(self.hw.devices.device_nodes(function.address))

    def _write_slices(self, wanted: Sequence[slices.PublishedDevice], node: Mapping[str, Any] | None) -> bool:
        if node is None:
            return False
        ref = slices.NodeRef(self.settings.node_name, str((node.get("metadata") or {}).get("uid", "")))
        objects = self.ports.objects
        try:
            existing = objects.list(
                slices.API_VERSION, slices.KIND, field_selector=f"spec.nodeName={self.settings.node_name}"
            )
            plan = slices.plan_slices(ref, wanted, existing.items)
            for body in plan.apply:
                stored = objects.apply(body, field_manager=FIELD_MANAGER, force=True)
                if self._taints_served and not slices.taints_kept(body, stored):
                    self._taints_served = False
                    self.say(
                        "taints",
                        "the API server drops device taints (DRADeviceTaints off, or an older server): devices "
                        "whose GPU is not fine are withdrawn from the ResourceSlices instead of tainted",
                        logging.WARNING,
                    )
            for name in plan.delete:
                objects.delete(slices.API_VERSION, slices.KIND, name)
        except ClusterError as exc:
            self.say("slices", f"cannot publish the ResourceSlices: {exc}", logging.WARNING)
            return False
        with self.claims.lock:
            self.claims.published = {d.name: d for d in wanted}
        self._known.update({d.name: d.address for d in wanted})
        if not plan.quiet:
            message = (
                f"published {len(wanted)} device(s) in {len(plan.apply)} slice(s), pool generation {plan.generation}"
            )
            self.say("slices", message)
            self.publisher.event(event_reasons.RESOURCE_SLICES_PUBLISHED, message)
        return True

    def _publish_health(self, facts: slices.NodeFacts) -> None:
        reports = health.reports(self.settings.node_name, self._known, self._present, self._verdicts, self.wall())
        with self._changed:
            if health.changed(self._reports, reports) or not self._version:
                self._version += 1
                self._changed.notify_all()
            self._reports = reports

    def _holders(self, functions: Sequence[PciFunction]) -> dict[PciAddress, tuple[str, ...]]:
        """Who holds each GPU that is not fine (for the health report): the prepared claims on such a GPU, read
        from the API server for their ``reservedFor``. Nothing is read while every GPU is fine."""
        checkpoint = self.claims.checkpoint()
        to_read = health.claims_to_read(checkpoint, self._known, self._verdicts)
        if not to_read:
            return {}
        read = []
        for entry in to_read:
            ref = entry.claim
            try:
                claim = self.ports.objects.get("resource.k8s.io/v1", "ResourceClaim", ref.name, ref.namespace)
            except ClusterError as exc:
                self.say("holders", f"cannot read ResourceClaim {ref.namespace}/{ref.name}: {exc}", logging.WARNING)
                claim = None
            read.append((entry, claim))
        return health.holders(read, self._known, functions)

    def registration(self, registered: bool, error: str) -> None:
        """What the kubelet said of the registration (NotifyRegistrationStatus)."""
        if registered:
            log.info("registered with the kubelet as %s", self.settings.plugin_dir.name)
        else:
            log.error("the kubelet refused the registration: %s", error)

    # --- HealthFeed ------------------------------------------------------------------------------------------

    def current(self) -> tuple[Sequence[model.DeviceHealthReport], int]:
        with self._changed:
            return self._reports, self._version

    def wait_changed(self, version: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._version > version, timeout)

    # --- ClaimPreparer (`services.dra_driver.claims`) ------------------------------------------------------

    def prepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, model.ClaimOutcome]:
        return self.claims.prepare(claims)

    def unprepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, str]:
        return self.claims.unprepare(claims)

    @property
    def prepared_claims(self) -> preparing.Checkpoint:
        return self.claims.checkpoint()
