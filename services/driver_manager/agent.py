"""driver-manager's round: the kernel driver (R-DRIVER), its parameters (R-MODPARAM), VFs (R-VF), firmware (R-FW).

Each round gathers the node's facts (the loaded ``metax`` module, the host's installed driver, driver-config
for this node, the PCI functions and their health), asks the core (`driver_plan.plan_driver`,
`payload_layout.choose_module` for the payload's module whose vermagic is the running kernel's,
`driver_config.vf_count_plan`, `policy.firmware_decision`), acts through the hardware port, and publishes:
the ``driver`` readiness signal (R-READY) and ``metax-tech.com/driver.*`` labels only when the module is
loaded as asked and every GPU answers, Events on the Node for what an administrator must know.

The MetaX field bug this must beat: when the loaded driver cannot be unloaded (processes hold the GPUs, or
it is built in), the agent does not crash. It keeps the node's current driver, says so in an Event
(``HostDriverInUse``) and in its readiness reason, and tries again with back-off. Every host write is
restartable: the payload copy is atomic, the module is loaded only when not loaded as wanted, the VF count
is compared with sysfs before each write, and flashed firmware is recorded before the reboot it needs.
A payload without a module for the running kernel (after a kernel update) loads and unloads nothing: one
``KernelNotCovered`` Event, not ready, and the next round looks again.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from metax_core import components
from metax_core.errors import ClusterError, HardwareError, InvalidSpec, MetaxError
from metax_core.inventory import METAX_MODULE, GpuHealth, ModuleState, PciAddress, PciFunction
from metax_core.node import driver_config, driver_plan, payload_layout, publish
from metax_core.node import labels as node_labels
from metax_core.node import uninstall as node_uninstall
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.wire import driver_verdict, event_reasons
from metax_hw import driver_files, driver_payload
from services._agent import base, cluster
from services._agent import uninstall as agent_uninstall
from services.driver_manager import firmware, loading, undo
from services.driver_manager.config import Settings

log = logging.getLogger(__name__)

COMPONENT = components.signal(components.Component.DRIVER)
DRIVER_READY_LABEL = node_labels.DRIVER_READY
DRIVER_VERSION_LABEL = node_labels.DRIVER_VERSION
OWNED_LABELS = node_labels.DRIVER_LABELS


@attrs.frozen
class Hardware:
    """The parts of the hardware port driver-manager uses (`metax_hw.host.Host` or a fake host's)."""

    devices: hardware.DeviceInventory
    binder: hardware.DriverBinder
    modules: hardware.KernelModules
    monitor: hardware.GpuMonitor
    processes: hardware.GpuProcesses
    firmware: hardware.Firmware

    @classmethod
    def of(cls, host: Any) -> Hardware:
        return cls(host.devices, host.binder, host.modules, host.monitor, host.monitor, host.firmware)


@attrs.frozen
class Outcome:
    """What the last round found (for logs, tests and the demo)."""

    plan: driver_plan.DriverPlan | None
    ready: driver_plan.DriverReadiness
    vf_plan: driver_config.VfCountPlan | None = None
    blocked: str | None = None


class DriverManager(base.NodeAgentBase):
    name = "driver-manager"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        ports: cluster.ClusterPorts,
        board: node_ports.ReadinessBoard | None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        pod_name: str | None = None,
    ) -> None:
        super().__init__(settings, COMPONENT, ports=ports, board=board, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self.state = driver_files.StateFile(settings.host_root)
        self.baseline = driver_files.BaselineFile(settings.host_root)
        self.payload_dir = pathlib.Path(settings.payload_dir)
        self.payload = driver_payload.HostDriverPayload(self.payload_dir, settings.host_root)
        self.config = driver_config.DriverConfig()
        self.loader = loading.Loader(
            settings,
            hw=hw,
            state_file=self.state,
            payload=self.payload,
            payload_dir=self.payload_dir,
            publisher=self.publisher,
            say=self.say,
            chores=self.chores,
            wall_clock=wall_clock,
            pod_name=os.environ.get("HOSTNAME", "") if pod_name is None else pod_name,
            # its pod's name (the runtime sets HOSTNAME to it): a verdict names the pod that reached it
        )
        self.outcome: Outcome | None = None
        self.firmware = firmware.FirmwareStep(
            settings,
            firmware=hw.firmware,
            processes=hw.processes,
            state_file=self.state,
            payload=self.payload,
            publisher=self.publisher,
            say=self.say,
        )

    # --- loop -----------------------------------------------------------------------------------------

    def tick(self) -> None:
        if not self.chores.due("sync", self.settings.interval):
            return
        if self.uninstall():
            return
        try:
            undo.record_first_touch(self.baseline, self.hw.modules, self.hw.devices)  # before any host change
        except OSError as exc:
            raise HardwareError("record the host before install", str(self.baseline.path), str(exc)) from exc
        try:
            self.outcome = self.sync()
        except MetaxError as exc:
            self.publisher.signal(False, str(exc))
            self.probe.not_ready()
            raise
        self.probe.report(self.outcome.ready.ready, self.outcome.ready.reason)

    def shutdown(self) -> None:
        """The driver stays loaded (workloads use it); the readiness signal stays as it is."""
        self.probe.not_ready()
        log.info("driver-manager stopped")

    def uninstall(self) -> bool:
        """When the finalizer asks (`services._agent.uninstall`): undo, answer, and do nothing else."""
        node = self._node()
        uid = self.uninstalling.check(node)
        if uid is None:
            return False
        self.probe.not_ready()
        waiting = node_uninstall.driver_waits(publish.node_metadata(node)[1], uid)
        if waiting is not None:  # its answer changes the Node: the watch wakes this round again
            self.say("uninstall", f"uninstall: {waiting}")
            return True
        kept = undo.undo(self.baseline, self.hw.modules, self.hw.binder, self.hw.devices)
        self.say("uninstall", "uninstall: host restored" + (f", kept: {'; '.join(kept)}" if kept else ""))
        agent_uninstall.answer(self.publisher, node, COMPONENT, uid, kept=kept)
        agent_uninstall.remove_ready_dir(self.settings.host_root)
        return True

    # --- the round ------------------------------------------------------------------------------------

    def sync(self) -> Outcome:
        s = self.settings
        node = self._node()
        wanted = driver_config.for_node(self._read_config(), s.node_name)
        loaded = self.hw.modules.state(METAX_MODULE)
        needs_host = driver_plan.needs_host_driver(s.deploy_policy)
        host_installed = self.hw.modules.installed_version(METAX_MODULE) if needs_host else None
        remembered = self.state.read()
        plan = driver_plan.plan_driver(
            s.deploy_policy, s.payload_version, host_installed, loaded, wanted, remembered.params
        )
        self.say("plan", f"{plan.step.value}: {plan.reason}")
        blocked = None
        if plan.step in (driver_plan.Step.LOAD, driver_plan.Step.RELOAD):
            module = self.loader.payload_module() if plan.from_payload else None
            if isinstance(module, payload_layout.KernelNotCovered):
                # the running driver (if any) is kept: never a wrong module
                blocked = self.loader.not_covered(module, plan)
            else:
                blocked = self.loader.load(plan, loaded, remembered, module)
                loaded = self.hw.modules.state(METAX_MODULE)
        self._tools(loaded)
        vf_plan = None
        if plan.step is not driver_plan.Step.LEAVE and loaded is not None:
            vf_plan = self._set_vfs(wanted.vfnum)
        functions = self.hw.devices.functions()
        found = driver_plan.driver_readiness(plan, loaded, functions, self._health())
        ready = driver_plan.round_readiness(found, blocked=blocked, vf_plan=vf_plan)
        self.firmware.run(functions, node)
        self._publish(node, ready)
        return Outcome(plan, ready, vf_plan, blocked)

    def _node(self) -> Mapping[str, Any] | None:
        return self.publisher.node_or_none(self.say)

    def _read_config(self) -> driver_config.DriverConfig:
        s = self.settings
        try:
            data = cluster.config_map_data(self.ports.objects, s.driver_config, s.namespace)
        except ClusterError as exc:
            self.say("config", f"cannot read ConfigMap {s.driver_config}, keeping the last one: {exc}", logging.WARNING)
            return self.config
        try:
            self.config = driver_config.parse(data)
        except InvalidSpec as exc:
            message = f"ConfigMap {s.namespace}/{s.driver_config} is invalid, keeping the last valid one: {exc}"
            if self.say("config", message, logging.ERROR):
                self.publisher.event(event_reasons.INVALID_DRIVER_CONFIG, message, warning=True)
            return self.config
        self.say("config", f"driver-config for {s.node_name}: {driver_config.for_node(self.config, s.node_name)}")
        return self.config

    def _set_vfs(self, vfnum: int) -> driver_config.VfCountPlan:
        plan = driver_config.vf_count_plan(self.hw.devices.functions(), vfnum)
        if plan.outcome is driver_config.PlanOutcome.REFUSE:
            if self.say("vfs", "VF count refused: " + "; ".join(plan.problems), logging.ERROR):
                self.publisher.event(event_reasons.VF_COUNT_REFUSED, "; ".join(plan.problems), warning=True)
            return plan
        if plan.writes:
            # Not ready while the counts change: gpu-device must never offer the half-changed inventory (one
            # GPU's VFs next to another's PF that is about to get VFs) to the kubelet (docs/device-plugin.md, O1).
            self.publisher.signal(False, f"setting {vfnum} VF(s) per GPU on {len(plan.writes)} GPU(s)")
        for write in plan.writes:
            try:
                self.hw.binder.set_vf_count(write.pf, write.target)
            except HardwareError as exc:
                problem = f"cannot set {write.target} VFs on {write.pf}: {exc}"
                self.say("vfs", problem, logging.ERROR)
                return attrs.evolve(plan, outcome=driver_config.PlanOutcome.REFUSE, problems=(problem,))
        if plan.writes:
            self.say("vfs", f"{vfnum} VF(s) per GPU on {len(plan.writes)} GPU(s)")
            self.publisher.event(event_reasons.VF_COUNT_SET, f"{vfnum} VF(s) per GPU")
        return plan

    def _tools(self, loaded: ModuleState | None) -> None:
        """The running driver's user space (mx-smi, libmxsml) where every agent finds it
        (`payload_layout.HOST_CURRENT`): the payload's staged, the link pointed at the running version's (before
        the health check runs mx-smi)."""
        s = self.settings
        try:
            if s.payload_version and self.payload.install_user_space(s.payload_version):
                self.say("tools", f"driver {s.payload_version}'s tools staged")
            self.payload.point_current(loaded.version if loaded is not None else None)
        except (HardwareError, OSError) as exc:
            self.say("tools", f"cannot provide the driver's tools: {exc}", logging.WARNING)

    def _health(self) -> Mapping[PciAddress, GpuHealth] | None:
        try:
            return self.hw.monitor.health()
        except HardwareError as exc:
            self.say("health", f"GPU health check failed: {exc}", logging.WARNING)
            return None

    def _publish(self, node: Mapping[str, Any] | None, ready: driver_plan.DriverReadiness) -> None:
        self.publisher.signal(ready.ready, ready.reason, version=ready.version if ready.ready else None)
        labels: dict[str, str | None] = {
            DRIVER_READY_LABEL: node_labels.TRUE if ready.ready else None,
            DRIVER_VERSION_LABEL: ready.version if ready.ready and ready.version else None,
        }
        if ready.ready:
            self.loader.verdict = None
        reached = self.loader.verdict
        verdict = {driver_verdict.ANNOTATION: None if reached is None else driver_verdict.encode(reached)}
        if node is None:
            return
        try:
            self.publisher.metadata(node, labels=labels, annotations=verdict)
        except ClusterError as exc:
            self.say("labels", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)

    def functions(self) -> Sequence[PciFunction]:
        return self.hw.devices.functions()
