"""Carrying out driver-manager's LOAD and RELOAD steps, and what a load that cannot happen leaves behind.

Why apart from the round: the round (`services.driver_manager.agent`) gathers and publishes; this is the one
place that changes the host's kernel module, with the MetaX field bug's rules (R-DRIVER): a driver that
cannot be unloaded is kept and retried with back-off (``HostDriverInUse``), a load that fails brings the
previous driver back (`driver_plan.after_failed_load`), a payload without a module for the running kernel
loads nothing (``KernelNotCovered``), and each of these reaches one verdict (`driver_verdict`) the operator's
rollout reads from the Node. Every host write is restartable: what was running is recorded before the unload.
"""

from __future__ import annotations

import datetime as dt
import logging
import pathlib
from collections.abc import Callable
from typing import Protocol

from metax_core.errors import HardwareError
from metax_core.inventory import METAX_MODULE, ModuleState, PciAddress
from metax_core.node import driver_plan, driver_state, payload_layout
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.wire import driver_verdict, event_reasons
from services._agent import loop, publish
from services.driver_manager.config import Settings

log = logging.getLogger(__name__)


class Hardware(Protocol):
    """The parts of the hardware port a load touches (driver-manager's `agent.Hardware` has them)."""

    @property
    def modules(self) -> hardware.KernelModules: ...

    @property
    def devices(self) -> hardware.DeviceInventory: ...

    @property
    def binder(self) -> hardware.DriverBinder: ...


class Loader:
    """Loads the planned driver, backs off while it cannot, and keeps the verdict the Node is told."""

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Hardware,
        state_file: node_ports.DriverStateStore,
        payload: node_ports.DriverPayload,
        payload_dir: pathlib.Path,
        publisher: publish.Publisher,
        say: loop.Say,
        chores: loop.Chores,
        wall_clock: Callable[[], dt.datetime],
        pod_name: str,
    ) -> None:
        self.settings = settings
        self.hw = hw
        self.state = state_file
        self.payload = payload
        self.payload_dir = payload_dir
        self.publisher = publisher
        self.say = say
        self.chores = chores
        self.wall_clock = wall_clock
        self.pod_name = pod_name
        self.failures = 0
        self.verdict: driver_verdict.Verdict | None = None
        """The wanted driver cannot load (`driver_verdict`): published on the Node for the operator's rollout."""
        self.say_blocked = ""

    def payload_module(self) -> payload_layout.ModuleChoice | payload_layout.KernelNotCovered:
        """The payload's module for the running kernel (`payload_layout.choose_module`), or why there is none."""
        running = self.hw.modules.running_kernel()
        found = self.payload.modules(self.hw.modules.file_vermagic)
        return payload_layout.choose_module(found, running)

    def not_covered(self, refusal: payload_layout.KernelNotCovered, plan: driver_plan.DriverPlan) -> str:
        """One Event per refusal (not one per round); the round goes on, the driver is not ready."""
        message, reason = refusal.message, event_reasons.KERNEL_NOT_COVERED
        cause = driver_verdict.Cause.KERNEL_NOT_COVERED
        if not refusal.covered and not refusal.detail:
            where = self.payload_dir / payload_layout.DRIVER_SUBDIR
            message = f"the payload has no {payload_layout.MODULE_FILE} under {where} (wrong driver image?)"
            reason, cause = event_reasons.DRIVER_LOAD_FAILED, driver_verdict.Cause.LOAD_REFUSED
        self.reached(cause, str(plan.choice.version), message)
        if self.say("kernel", message, logging.WARNING):
            self.publisher.event(reason, message, warning=True)
        return message

    def load(
        self,
        plan: driver_plan.DriverPlan,
        loaded: ModuleState | None,
        remembered: driver_state.HostState,
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
                path = self.payload.install_driver(version, module)
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
        self, loaded: ModuleState, remembered: driver_state.HostState, module: payload_layout.ModuleChoice | None
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

    def _failed_load(self, plan: driver_plan.DriverPlan, exc: Exception, remembered: driver_state.HostState) -> str:
        """The chosen driver did not load: never leave the node driverless (load the previous one again)."""
        failure = exc.detail if isinstance(exc, HardwareError) else str(exc)
        message = f"cannot load metax {plan.choice.version}: {failure}"
        self.reached(driver_verdict.Cause.LOAD_REFUSED, str(plan.choice.version), failure)
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

    def reached(self, cause: driver_verdict.Cause, version: str, message: str) -> None:
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
