"""gpu-device's control loop: gather the node's facts, ask the core what to advertise, apply it to kubelet.

Every ``tick`` the loop does only what has come due: the inventory and health (every healthy_interval),
the node's labels (sGPU mode, QoS policy), the readiness signals of the components it depends on, and the
state of kubelet's socket and of its own plugin servers. It then asks `metax_core.node.devices.plan_devices`
for each resource's devices and applies the plan: start or stop a plugin server per active resource, push
the device list (every open ListAndWatch stream sends it at once), (re)register after a kubelet restart
or after its own server failed, and keep the CDI spec in step.

The agent also answers the plugin servers' Allocate and GetPreferredAllocation calls
(`ports.node.AllocationBackend`) from the last plan, which it swaps atomically, so gRPC threads never see a
half-applied state (`services.gpu_device.allocation`); its plugin servers and their registration with the
kubelet are kept by `services.gpu_device.registration`.

CDI spec and device list stay in step (`metax_core.node.cdi_sync`, docs/device-plugin.md "Orderings"):
each round writes the spec first (durably), then offers only the devices whose entry is on disk; entries
of withdrawn devices stay while a pod holds them (the kubelet's PodResources), and Allocate refuses a
device whose entry is not in the spec on disk.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import ClusterError, HardwareError, InvalidSpec, PortError
from metax_core.inventory import PciAddress, PciFunction
from metax_core.node import cdi_sync, devices, readiness, uninstall
from metax_core.ports import node as node_ports
from metax_core.ports.hardware import DeviceInventory, GpuMonitor
from metax_core.topology import document
from services._agent import base, cluster, loop
from services._agent import health as health_watch
from services.gpu_device import allocation, cdi_keeper, registration, undo
from services.gpu_device.config import Settings

log = logging.getLogger(__name__)

COMPONENT = "gpu-device"

PluginFactory = Callable[[devices.Resource, "Agent"], node_ports.ResourcePlugin]
HeldDevices = cdi_keeper.HeldDevices
DeviceHolders = Callable[[], Mapping[str, Sequence[str]]]
"""Device ID → the pods holding it (the kubelet's PodResources, `podresources.device_holders`)."""
KubeletWatch = registration.KubeletWatch
Snapshot = allocation.Snapshot


@attrs.frozen
class Hardware:
    """The parts of the hardware port gpu-device reads (`metax_hw.host.Host` or a fake host's)."""

    devices: DeviceInventory
    monitor: GpuMonitor

    @classmethod
    def of(cls, host: Any) -> Hardware:
        return cls(host.devices, host.monitor)


class Agent(base.NodeAgentBase):
    """The gpu-device node agent. `run` loops until its stop event is set, then shuts down cleanly."""

    name = COMPONENT

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard,
        cdi_file: node_ports.CdiSink | None,
        plugin_factory: PluginFactory,
        kubelet: KubeletWatch,
        held: HeldDevices | None = None,
        holders: DeviceHolders | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        # It publishes no readiness signal (it reads the others'); its Events are the health watch's.
        super().__init__(settings, COMPONENT, ports=ports, board=None, log=log, clock=clock)
        self.settings = settings
        self._inventory = hw.devices
        self._nodes = ports.nodes
        self._board = board
        self._clock = clock
        self._wall = wall
        self.snapshot = Snapshot()
        self.registrations = registration.Registrations(
            lambda resource: plugin_factory(resource, self), kubelet, self.say
        )
        self._functions: Sequence[PciFunction] = ()
        self._device_nodes: dict[PciAddress, tuple[str, ...]] = {}
        self._iommu = False
        self._health: dict[PciAddress, devices.Health] = {}
        self.health = health_watch.HealthWatch(
            self.name,
            settings.node_name,
            monitor=hw.monitor,
            nodes=ports.nodes,
            events=ports.events,
            rules=settings.health_rules,
            wall=lambda: wall().timestamp(),
        )
        self._holders = holders
        self._node = devices.NodeSettings()
        self._topology: document.NodeTopology | None = None
        self._decision = readiness.AdvertiseDecision(False, reason="readiness not read yet")
        self._inventory_signals: Mapping[str, readiness.ComponentReadiness] | None = None
        """The readiness signals the kept inventory was read under."""
        self._advertising = False
        self._cdi = (
            cdi_keeper.CdiKeeper(
                cdi_file,
                held=held,
                grace=settings.cdi_grace,
                held_interval=settings.readiness_interval,
                clock=clock,
                say=self.say,
            )
            if cdi_file is not None and settings.cdi_enabled
            else None
        )
        self._uninstall: tuple[str, Mapping[str, object] | None] | None = None
        """The uid of the uninstall the Node asks for, and the Node as read (None: none asked)."""

    @property
    def plugins(self) -> dict[devices.Resource, node_ports.ResourcePlugin]:
        """The plugin server of each resource offered (`registration.Registrations`)."""
        return self.registrations.plugins

    @property
    def decision(self) -> readiness.AdvertiseDecision:
        """The last readiness decision (R-READY), for logs and tests."""
        return self._decision

    # --- AllocationBackend for the plugin servers --------------------------------------------------------------------

    def allocate(self, resource: devices.Resource, ids: Sequence[str]) -> devices.ContainerAllocation:
        """The allocation the current snapshot answers (`allocation.allocate`); noted for the CDI spec's keeper."""
        answer = allocation.allocate(
            self.snapshot, resource, ids, shares=self.settings.sgpu_shares, with_cdi=self.settings.cdi_enabled
        )
        if self._cdi is not None:
            self._cdi.allocated(resource, ids)
        return answer

    def preferred(
        self, resource: devices.Resource, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]:
        return allocation.preferred(self.snapshot, resource, available, must_include, size)

    # --- loop ----------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        log.info("gpu-device starting on node %s", self.settings.node_name)
        loop.serve(self, stop, tick=self.settings.tick)

    def tick(self) -> None:
        """One gather → decide → apply round."""
        now = self._clock()
        self._gather(now)
        if self._uninstall is not None:
            uid, node = self._uninstall
            self.registrations.registered.clear()
            kept = undo.undo(self.plugins, self._cdi.sink if self._cdi is not None else None)
            self.probe.not_ready()
            self._uninstall = (uid, undo.answer(self._nodes, self.settings.node_name, node, uid, kept))
            return
        plan = devices.plan_devices(
            self._functions,
            settings=self._node,
            shares=self.settings.sgpu_shares,
            health=self._health,
            iommu_enabled=self._iommu,
            ready=self._decision.may_advertise,
            not_ready_reason=self._decision.reason,
        )
        self._apply(plan, now)
        # ready (the pod's readinessProbe, R-READY): advertising, and every resource offered registered
        self.probe.report(*(self.registrations.ready(plan) if self._advertising else (False, "")))

    def shutdown(self) -> None:
        """Stop every plugin server (kubelet sees the streams end), then remove the CDI spec, except the
        entries pods still hold (their containers may be created again: a restart, a crash-looping one)."""
        self.registrations.stop()
        self.probe.not_ready()
        if self._cdi is not None and self._uninstall is None:  # uninstalled: the spec is gone for good
            self._cdi.retire()
        log.info("gpu-device stopped")

    # --- gather --------------------------------------------------------------------------------------------

    def _due(self, chore: str, interval: float, now: float) -> bool:
        return self.chores.due(chore, interval, now)

    def _gather(self, now: float) -> None:
        s = self.settings
        health_due = s.healthy_interval > 0 and self._due("health", s.healthy_interval, now)
        if self._due("inventory", s.inventory_interval, now) or health_due:
            self._read_inventory()
        if health_due:
            self._read_health()
        elif s.healthy_interval <= 0:
            self._health = {}
        if self._due("labels", s.label_interval, now):
            self._read_labels()
        if self._due("readiness", s.readiness_interval, now):
            self._read_readiness()

    def _read_inventory(self) -> None:
        """Read the PCI functions, consistently: the readiness signals read before and after must be the same
        writes. driver-manager withdraws its signal before it changes VF counts, so a read that overlaps a
        change is thrown away (and read again at the next tick) instead of offering a half-changed inventory."""
        try:
            before = self._board.read_all() if self.settings.required_components else None
            functions = self._inventory.functions()
            nodes = {
                f.address: tuple(self._inventory.device_nodes(f.address)) for f in functions if devices.is_native(f)
            }
            iommu = self._inventory.iommu_enabled()
            after = self._board.read_all() if self.settings.required_components else None
        except HardwareError as exc:
            self.say("inventory", f"cannot read the GPU inventory, keeping the last one: {exc}", logging.WARNING)
            return
        if before != after:
            self.say("inventory", "readiness changed while reading the GPU inventory: reading it again")
            self.chores.soon("inventory")
            self.chores.soon("readiness")
            return
        if after is not None:
            self._decide(after)  # the inventory goes with the readiness it was read under
        self._inventory_signals = after
        self.say("inventory", f"{len(functions)} MetaX PCI function(s)")
        self._functions, self._device_nodes, self._iommu = functions, nodes, iommu

    def _read_health(self) -> None:
        """One reading through the verdict machine (R-HEALTH); a fault not yet in force is read again soon, and
        the report on the Node names who holds each GPU that is not fine (the operator's remediation reads it)."""
        self.health.read(self._functions)
        if self.health.recheck:
            self.chores.later("health", self.health.rules.recheck_after(self.settings.healthy_interval))
        self._health = self.health.health(self._functions)
        if self._uninstall is None:  # once uninstall is asked, the Node's keys are the operator's to remove
            self.health.publish(self._functions, self._holders_of_sick())

    def _holders_of_sick(self) -> dict[PciAddress, tuple[str, ...]]:
        """Who holds the GPUs that are not fine (the kubelet's PodResources, asked only then)."""
        if self._holders is None or all(h.healthy for h in self._health.values()):
            return {}
        try:
            return devices.holders_by_function(self._holders(), self._functions)
        except PortError as exc:
            self.say("holders", f"cannot ask the kubelet who holds the GPUs: {exc}", logging.WARNING)
            return {}

    def _read_labels(self) -> None:
        try:
            node = self._nodes.get_node(self.settings.node_name)
        except ClusterError as exc:
            self.say(
                "labels", f"cannot read node {self.settings.node_name}, keeping its labels: {exc}", logging.WARNING
            )
            return
        if node is None:
            self.say("labels", f"node {self.settings.node_name} not found, keeping its labels", logging.WARNING)
            return
        labels = (node.get("metadata") or {}).get("labels") or {}
        self.health.seen_on_node(node)
        uid = uninstall.requested((node.get("metadata") or {}).get("annotations"))
        if uid is not None:
            self._uninstall = (uid, node)
        elif self._uninstall is not None:  # once asked, uninstalled until it exits (the request goes last)
            self._uninstall = (self._uninstall[0], node)
        self._node = devices.settings_from_labels(labels)
        self._topology = self._read_topology((node.get("metadata") or {}).get("annotations") or {})
        self.say("mode", f"mode {self._node.mode.value}, sGPU QoS policy {self._node.qos.value}")

    def _read_topology(self, annotations: Mapping[str, str]) -> document.NodeTopology | None:
        text = annotations.get(document.TOPOLOGY)
        try:
            return None if text is None else document.decode(text)
        except InvalidSpec as exc:
            self.say("topology", f"ignoring the node's topology document: {exc}", logging.WARNING)
            return None

    def _read_readiness(self) -> None:
        try:
            signals = self._board.read_all()
        except HardwareError as exc:
            self.say("readiness", f"cannot read readiness signals, keeping the last decision: {exc}", logging.WARNING)
            return
        if self.settings.required_components and signals != self._inventory_signals:
            # The inventory was read under other signals: one read while driver-manager changed VF counts holds a
            # half-changed inventory, and deciding on the new signals alone would offer it. Read it again under
            # these (it decides with them), or keep the last decision until a consistent read.
            self._read_inventory()
            return
        self._decide(signals)

    def _decide(self, signals: Mapping[str, readiness.ComponentReadiness]) -> None:
        max_age = self.settings.readiness_max_age
        self._decision = readiness.decide(
            self.settings.required_components,
            signals,
            now=self._wall() if max_age is not None else None,
            max_age=datetime.timedelta(seconds=max_age) if max_age is not None else None,
        )
        level = logging.INFO if self._decision.may_advertise else logging.WARNING
        self.say("readiness", f"advertising allowed: {self._decision.may_advertise} ({self._decision.reason})", level)

    # --- apply ---------------------------------------------------------------------------------------------

    def _apply(self, plan: devices.Plan, now: float) -> None:
        if plan.problems:
            self.say("problems", "; ".join(plan.problems), logging.WARNING)
        else:
            self.say.forget("problems")
        resolvable: frozenset[str] | None = None
        if self._cdi is not None:
            resolvable = self._cdi.sync(plan, self._device_nodes, now)
            offer = cdi_sync.advertisable(plan, resolvable)
            if offer.withheld:
                self.say(
                    "withheld",
                    f"not advertising {', '.join(offer.withheld)}: no CDI entry on disk for them",
                    logging.WARNING,
                )
            else:
                self.say.forget("withheld")
            plan = offer.plan
        self.snapshot = self.snapshot.renewed(plan, dict(self._device_nodes), self._node, resolvable, self._topology)
        if not self._advertising:
            if not self._decision.may_advertise:
                self.say("waiting", f"advertising nothing yet: {self._decision.reason}", logging.WARNING)
                return
            self._advertising = True
            log.info("required components ready: advertising")
        self.registrations.offer(plan, probe=self._due("probe", self.settings.probe_interval, now))
