"""vfio-manager's round (R-VFIO): ``metax-vfio-config`` → which GPUs go to vfio-pci → bind → annotate the Node.

GPUs are indexed by sorted PCI address (VFs when virtualisation is on, `vfio.indexed_gpus`). Selected GPUs
are bound to vfio-pci (the adapter checks the IOMMU group and rolls a failed bind back), unselected ones on
vfio-pci go back to ``metax``, and a selected GPU whose IOMMU group holds an unselected GPU is not bound
(`vfio.group_conflicts`). The result is the annotation ``metax-tech.com/gpu-vfio`` (``{"0":1,"2":0}``, 1 bound,
0 failed). A failed bind is retried with back-off per GPU; a node without an IOMMU says ``IOMMUDisabled`` in
an Event and in its readiness reason. Binding is idempotent, so a manager killed mid-bind converges on its
next round. The vfio-pci module is loaded with the image's own modprobe (no hostPID: docs/hardware.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core import components
from metax_core.errors import ClusterError, HardwareError, InvalidSpec
from metax_core.inventory import METAX_MODULE, VFIO_DRIVER, PciAddress
from metax_core.node import vfio, vfio_config_map
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.spec import vfio_config
from metax_core.spec.model import VfioConfigEntry
from metax_core.wire import event_reasons
from metax_hw import vfio_marker
from services._agent import base, cluster, loop
from services._agent import uninstall as agent_uninstall
from services.vfio_manager import undo
from services.vfio_manager.config import Settings

log = logging.getLogger(__name__)

COMPONENT = components.signal(components.Component.VFIO_MANAGER)


@attrs.frozen
class Hardware:
    devices: hardware.DeviceInventory
    binder: hardware.DriverBinder
    modules: hardware.KernelModules

    @classmethod
    def of(cls, host: Any) -> Hardware:
        return cls(host.devices, host.binder, host.modules)


class VfioManager(base.NodeAgentBase):
    name = "vfio-manager"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self.entries: tuple[VfioConfigEntry, ...] = ()
        self.failures: dict[PciAddress, int] = {}
        self.problems: dict[PciAddress, str] = {}
        self.marker: node_ports.VfioLoadMarker = vfio_marker.HostVfioMarker(settings.host_root)

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        try:
            if self.uninstall():
                return
            ready, reason = self.sync()
        except HardwareError as exc:
            self.say("sync", f"cannot read the GPU inventory: {exc}", logging.WARNING)
            self.publisher.signal(False, str(exc))
            self.probe.not_ready()
            return
        self.publisher.signal(ready, reason)
        self.probe.report(ready, reason)  # the selection applied, or no file (R-READY)

    def uninstall(self) -> bool:
        """When the finalizer asks (`services._agent.uninstall`): undo, answer, and do nothing else."""
        node = self.publisher.node_or_none(self.say)
        uid = self.uninstalling.check(node)
        if uid is None:
            return False
        self.probe.not_ready()
        kept = undo.undo(self.marker, self.hw.devices, self.hw.binder, self.hw.modules)
        self.say("uninstall", "uninstall: GPUs back on their native driver" + (f", kept: {kept}" if kept else ""))
        agent_uninstall.answer(self.publisher, node, COMPONENT, uid, kept=kept, annotations=(vfio.ANNOTATION,))
        agent_uninstall.remove_ready_dir(self.settings.host_root)
        return True

    def shutdown(self) -> None:
        """Bound GPUs stay bound (virtual machines use them); only a config change gives them back."""
        self.probe.not_ready()
        log.info("vfio-manager stopped")

    def sync(self) -> tuple[bool, str]:
        s = self.settings
        selection = vfio_config.selection_for_node(self._entries(), s.node_name)
        functions = self.hw.devices.functions()
        native_loaded = self.hw.modules.state(METAX_MODULE) is not None
        plan = vfio.plan(functions, selection, native_loaded=native_loaded)
        if plan.missing_indexes:
            self.say("missing", f"selected GPU index(es) {list(plan.missing_indexes)} do not exist on this node")
        conflicts = vfio.group_conflicts(functions, selection)
        problems: dict[PciAddress, str] = {a: why for a, why in conflicts.items() if a in plan.to_vfio}
        to_bind = [a for a in plan.to_vfio if a not in problems]
        if to_bind and not self.hw.devices.iommu_enabled():
            message = (
                f"{vfio.IOMMU_DISABLED}: {len(to_bind)} GPU(s) are selected for vfio-pci but the IOMMU is off; "
                "enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on or amd_iommu=on"
            )
            if self.say("iommu", message, logging.ERROR):
                self.publisher.event(vfio.IOMMU_DISABLED, message, warning=True)
            problems.update(dict.fromkeys(to_bind, message))
            to_bind = []
        else:
            self.say.forget("iommu")
        if to_bind:
            self._ensure_vfio_module()
        for address in to_bind:
            self._move(address, VFIO_DRIVER, problems)
        for address in plan.to_native:
            self._move(address, None, problems)
        after = self.hw.devices.functions()
        result = vfio.results(after, selection)
        self._annotate(result)
        self.problems = problems
        bound = sum(result.values())
        if problems:
            return False, "; ".join(sorted(set(problems.values())))
        return True, f"{bound} GPU(s) on vfio-pci" if result else "no GPU selected for vfio-pci on this node"

    def _entries(self) -> tuple[VfioConfigEntry, ...]:
        s = self.settings
        try:
            data = cluster.config_map_data(self.ports.objects, s.vfio_config, s.namespace)
            self.entries = vfio_config_map.parse(data)
            self.say("config", f"{s.vfio_config}: {len(self.entries)} entr(y/ies)")
        except ClusterError as exc:
            self.say("config", f"cannot read ConfigMap {s.vfio_config}, keeping the last one: {exc}", logging.WARNING)
        except InvalidSpec as exc:
            message = f"ConfigMap {s.namespace}/{s.vfio_config} is invalid, keeping the last valid one: {exc}"
            if self.say("config", message, logging.ERROR):
                self.publisher.event(event_reasons.INVALID_VFIO_CONFIG, message, warning=True)
        return self.entries

    def _ensure_vfio_module(self) -> None:
        try:
            if self.hw.modules.state(VFIO_DRIVER) is None:
                self.marker.mark()  # before the load: the uninstall unloads only what we loaded
                self.hw.modules.load(VFIO_DRIVER, {})
        except HardwareError as exc:
            self.say("module", f"cannot load {VFIO_DRIVER}: {exc}", logging.ERROR)

    def _move(self, address: PciAddress, driver: str | None, problems: dict[PciAddress, str]) -> None:
        """Bind to ``driver`` (None: back to the default driver), with back-off per GPU after failures."""
        chore = f"bind:{address}"
        if self.failures.get(address) and not self.chores.due(chore, 0):
            problems[address] = self.problems.get(address, f"{address}: waiting to retry")
            return
        try:
            if driver is None:
                self.hw.binder.reset_driver(address)
            else:
                self.hw.binder.bind(address, driver)
        except HardwareError as exc:
            failures = self.failures[address] = self.failures.get(address, 0) + 1
            delay = loop.backoff(failures)
            self.chores.later(chore, delay)
            target = driver or "its default driver"
            problems[address] = f"cannot move {address} to {target}: {exc.detail} (retry in {delay:.0f}s)"
            if self.say(chore, problems[address], logging.WARNING):
                self.publisher.event(event_reasons.VFIO_BIND_FAILED, problems[address], warning=True)
            return
        self.failures.pop(address, None)
        self.say.forget(chore)
        self.say(f"moved:{address}", f"{address} is on {driver or 'its default driver'}")

    def _annotate(self, result: Mapping[int, bool]) -> None:
        value = vfio.annotation_value(result) if result else None
        try:
            node = self.publisher.node()
            if node is not None:
                self.publisher.metadata(node, annotations={vfio.ANNOTATION: value})
        except ClusterError as exc:
            self.say("annotate", f"cannot annotate node {self.settings.node_name}: {exc}", logging.WARNING)
