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

from metax_core.cluster import components
from metax_core.errors import ClusterError, HardwareError, InvalidSpec, MetaxError
from metax_core.inventory import METAX_MODULE, GpuHealth, ModuleState, PciAddress, PciFunction
from metax_core.node import driver_config, driver_plan, payload_layout, publish
from metax_core.node import labels as node_labels
from metax_core.node import uninstall as node_uninstall
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.spec import model as spec
from metax_core.wire import driver_verdict, event_reasons
from services._agent import base, cluster, loop
from services._agent import uninstall as agent_uninstall
from services.driver_manager import firmware, payload, state, undo
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
        self.wall_clock = wall_clock
        self.pod_name = os.environ.get("HOSTNAME", "") if pod_name is None else pod_name
        """Its pod's name (the runtime sets HOSTNAME to it): a verdict names the pod that reached it."""
        self.verdict: driver_verdict.Verdict | None = None
        """The wanted driver cannot load (`driver_verdict`): published on the Node for the operator's rollout."""
        self.settings = settings
        self.hw = hw
        self.state = state.StateFile(settings.host_root)
        self.baseline = undo.BaselineFile(settings.host_root)
        self.payload_dir = pathlib.Path(settings.payload_dir)
        self.config = driver_config.DriverConfig()
        self.failures = 0
        self.outcome: Outcome | None = None
        self.firmware = firmware.FirmwareStep(
            settings,
            firmware=hw.firmware,
            processes=hw.processes,
            state_file=self.state,
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
        needs_host = s.deploy_policy in (spec.DeployPolicy.PREFER_HOST, spec.DeployPolicy.PREFER_NEWER)
        host_installed = self.hw.modules.installed_version(METAX_MODULE) if needs_host else None
        remembered = self.state.read()
        plan = driver_plan.plan_driver(
            s.deploy_policy, s.payload_version, host_installed, loaded, wanted, remembered.params
        )
        self.say("plan", f"{plan.step.value}: {plan.reason}")
        blocked = None
        if plan.step in (driver_plan.Step.LOAD, driver_plan.Step.RELOAD):
            module = self._payload_module() if plan.from_payload else None
            if isinstance(module, payload_layout.KernelNotCovered):
                blocked = self._not_covered(module, plan)  # the running driver (if any) is kept: never a wrong module
            else:
                blocked = self._load(plan, loaded, remembered, module)
                loaded = self.hw.modules.state(METAX_MODULE)
        self._tools(loaded)
        vf_plan = None
        if plan.step is not driver_plan.Step.LEAVE and loaded is not None:
            vf_plan = self._set_vfs(wanted.vfnum)
        functions = self.hw.devices.functions()
        ready = driver_plan.driver_readiness(plan, loaded, functions, self._health())
        if blocked is not None:
            ready = driver_plan.DriverReadiness(False, blocked, ready.version)
        elif vf_plan is not None and vf_plan.outcome is driver_config.PlanOutcome.REFUSE:
            ready = driver_plan.DriverReadiness(False, "VF count refused: " + "; ".join(vf_plan.problems))
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

    def _payload_module(self) -> payload_layout.ModuleChoice | payload_layout.KernelNotCovered:
        """The payload's module for the running kernel (`payload_layout.choose_module`), or why there is none."""
        running = self.hw.modules.running_kernel()
        found = payload.payload_modules(self.payload_dir, self.hw.modules)
        return payload_layout.choose_module(found, running)

    def _not_covered(self, refusal: payload_layout.KernelNotCovered, plan: driver_plan.DriverPlan) -> str:
        """One Event per refusal (not one per round); the round goes on, the driver is not ready."""
        message, reason = refusal.message, event_reasons.KERNEL_NOT_COVERED
        cause = driver_verdict.Cause.KERNEL_NOT_COVERED
        if not refusal.covered and not refusal.detail:
            where = self.payload_dir / payload_layout.DRIVER_SUBDIR
            message = f"the payload has no {payload_layout.MODULE_FILE} under {where} (wrong driver image?)"
            reason, cause = event_reasons.DRIVER_LOAD_FAILED, driver_verdict.Cause.LOAD_REFUSED
        self._reached(cause, str(plan.choice.version), message)
        if self.say("kernel", message, logging.WARNING):
            self.publisher.event(reason, message, warning=True)
        return message

    def _load(
        self,
        plan: driver_plan.DriverPlan,
        loaded: ModuleState | None,
        remembered: state.HostState,
        module: payload_layout.ModuleChoice | None,
    ) -> str | None:
        """Carry out LOAD/RELOAD; returns why it could not (the node keeps or gets back a driver), else None."""
        if self.failures and not self.chores.due("load", 0):
            return self.say_blocked  # backing off: the node keeps its current driver meanwhile
        self.say.forget("kernel")  # covered (again): a later refusal is news
        modules = self.hw.modules
        try:
            path = None
            if module is not None:
                version = str(plan.choice.version)
                path = payload.install_driver(self.payload_dir, self.settings.host_root, version, module)
                self.say("module", f"payload module {module.module.relpath} ({module.module.vermagic}) for {version}")
            if plan.step is driver_plan.Step.RELOAD and loaded is not None:
                remembered.previous = self._running(loaded, remembered, module)
                self.state.write(remembered)  # before the unload: a restart in between still knows it
                try:
                    modules.unload(METAX_MODULE)
                except HardwareError as exc:
                    remembered.previous = None
                    self.state.write(remembered)
                    return self._blocked(
                        driver_plan.HOST_DRIVER_IN_USE,
                        f"cannot unload metax {loaded.version or ''} to load {plan.choice.version} "
                        f"({exc.detail}); keeping the running driver and retrying with back-off",
                    )
            remembered.params = None
            self.state.write(remembered)  # an interrupted load must not be taken for ours
            if path is None:
                modules.load(METAX_MODULE, plan.params)
            else:
                modules.load_file(path, plan.params)
            remembered.params = dict(plan.params)
            remembered.version, remembered.module_file = str(plan.choice.version), path
            remembered.previous = None
            self.state.write(remembered)
        except (HardwareError, OSError) as exc:
            return self._failed_load(plan, exc, remembered)
        self.failures = 0
        self.verdict = None
        self.say("blocked", f"loaded metax {plan.choice.version} ({plan.choice.source.value})")
        self.publisher.event(
            driver_plan.DRIVER_READY, f"loaded metax {plan.choice.version} with {dict(plan.params) or 'no parameters'}"
        )
        return None

    def _running(
        self, loaded: ModuleState, remembered: state.HostState, module: payload_layout.ModuleChoice | None
    ) -> driver_plan.RunningDriver:
        release = module.release if module is not None else self.hw.modules.running_kernel().release
        staged = driver_plan.payload_module_path(str(loaded.version), release) if loaded.version else None
        if staged is not None and not (self.settings.host_root / staged.lstrip("/")).is_file():
            staged = None
        return driver_plan.running_driver(
            loaded,
            self.hw.devices.functions(),
            our_params=remembered.params,
            our_file=remembered.module_file,
            our_version=remembered.version,
            staged_file=staged,
        )

    def _failed_load(self, plan: driver_plan.DriverPlan, exc: Exception, remembered: state.HostState) -> str:
        """The chosen driver did not load: never leave the node driverless (load the previous one again)."""
        failure = exc.detail if isinstance(exc, HardwareError) else str(exc)
        message = f"cannot load metax {plan.choice.version}: {failure}"
        self._reached(driver_verdict.Cause.LOAD_REFUSED, str(plan.choice.version), failure)
        try:
            now = self.hw.modules.state(METAX_MODULE)
        except HardwareError:
            now = None
        previous = remembered.previous
        action = driver_plan.after_failed_load(now, previous)
        if action is not driver_plan.AfterFailedLoad.RESTORE or previous is None:
            return self._blocked(driver_plan.DRIVER_LOAD_FAILED, message)
        try:
            if previous.module_file is None:
                self.hw.modules.load(METAX_MODULE, previous.params)
            else:
                self.hw.modules.load_file(previous.module_file, previous.params)
            for pf, count in sorted(previous.vf_counts.items()):
                self.hw.binder.set_vf_count(PciAddress(pf), count)
        except (HardwareError, OSError) as again:
            self.publisher.event(
                driver_plan.DRIVER_RESTORE_FAILED,
                f"{message}; the previous {previous.describe()} did not load again either: {again}",
                warning=True,
            )
            return self._blocked(
                driver_plan.DRIVER_LOAD_FAILED,
                f"{message}; restoring the previous {previous.describe()} failed: {again}",
            )
        remembered.params, remembered.version = dict(previous.params), previous.version
        remembered.module_file, remembered.previous = previous.module_file, None
        self.state.write(remembered)
        restored = driver_plan.restored_readiness(str(plan.choice.version), failure, previous)
        self.say("restored", restored, logging.WARNING)
        self.publisher.event(driver_plan.PREVIOUS_DRIVER_RESTORED, restored, warning=True)
        return self._blocked(
            driver_plan.DRIVER_LOAD_FAILED, f"{restored}; retrying {plan.choice.version} with back-off"
        )

    def _reached(self, cause: driver_verdict.Cause, version: str, message: str) -> None:
        """The verdict that ``version`` cannot load; one already reached for the same cause and version keeps its
        moment and text (the Node is written once per verdict, not once per round)."""
        if self.verdict is None or (self.verdict.cause, self.verdict.version) != (cause, version):
            self.verdict = driver_verdict.Verdict(cause, version, message, self.wall_clock(), self.pod_name)

    def _blocked(self, reason: str, message: str) -> str:
        self.failures += 1
        delay = loop.backoff(self.failures)
        self.chores.later("load", delay)
        self.say_blocked = f"{message} (next attempt in {delay:.0f}s)"
        if self.say("blocked", self.say_blocked, logging.WARNING):
            self.publisher.event(reason, message, warning=True)
        return self.say_blocked

    say_blocked = ""

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
            if s.payload_version and payload.install_user_space(self.payload_dir, s.host_root, s.payload_version):
                self.say("tools", f"driver {s.payload_version}'s tools staged")
            payload.point_current(s.host_root, loaded.version if loaded is not None else None)
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
            self.verdict = None
        verdict = {driver_verdict.ANNOTATION: None if self.verdict is None else driver_verdict.encode(self.verdict)}
        if node is None:
            return
        try:
            self.publisher.metadata(node, labels=labels, annotations=verdict)
        except ClusterError as exc:
            self.say("labels", f"cannot label node {self.settings.node_name}: {exc}", logging.WARNING)

    def functions(self) -> Sequence[PciFunction]:
        return self.hw.devices.functions()
