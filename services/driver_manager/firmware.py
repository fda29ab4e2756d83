"""driver-manager's firmware step (R-FW, §3.2.9): flash the payload's VBIOS when the policy and every rule allow.

The decision is `metax_core.node.policy.firmware_decision`; this step gathers its facts (VBIOS per PF, the
payload's image version), refuses while GPU processes run on the node, copies the image to the host
(`ports.node.DriverPayload`), flashes through the Firmware port, and emits ``NodeNeedReboot`` with the seed's
message. What was flashed is recorded on the host (`ports.node.DriverStateStore`), so the node is not flashed
again before the reboot that activates it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from metax_core.errors import ClusterError, HardwareError
from metax_core.inventory import PciFunction
from metax_core.node import driver_plan, labels, policy
from metax_core.ports import hardware
from metax_core.ports import node as node_ports
from metax_core.spec import model as spec
from services._agent import loop, publish
from services.driver_manager.config import Settings

log = logging.getLogger(__name__)


class FirmwareStep:
    def __init__(
        self,
        settings: Settings,
        *,
        firmware: hardware.Firmware,
        processes: hardware.GpuProcesses,
        state_file: node_ports.DriverStateStore,
        payload: node_ports.DriverPayload,
        publisher: publish.Publisher,
        say: loop.Say,
    ) -> None:
        self.settings = settings
        self.firmware = firmware
        self.processes = processes
        self.state = state_file
        self.publisher = publisher
        self.say = say
        self.payload = payload
        self.last: policy.FirmwareDecision | None = None

    def run(self, functions: Sequence[PciFunction], node: Mapping[str, Any] | None) -> None:
        a, s = self, self.settings
        if _node_label(node, labels.FIRMWARE_FLASHING) is not None:
            self._flashing(node, False)  # left by a driver-manager stopped mid-flash: no flash runs now
        if s.fw_upgrade_policy is spec.FirmwarePolicy.NEVER:
            return
        try:
            info = a.firmware.info()
        except HardwareError as exc:
            a.say("firmware", f"cannot read firmware versions, not flashing: {exc}", logging.WARNING)
            return
        remembered = a.state.read()
        running = {i.address: i.vbios_version for i in info}
        pending = driver_plan.firmware_pending(remembered.flashed, running)
        if set(remembered.flashed) - set(pending):
            remembered.flashed = {k: v for k, v in remembered.flashed.items() if k in pending}
            a.state.write(remembered)
        if pending:
            a.say("firmware", f"firmware flashed on {', '.join(pending)}; waiting for the node's reboot")
            return
        decision = policy.firmware_decision(
            s.fw_upgrade_policy,
            s.fw_enable_virt,
            s.physical_machine,
            info,
            functions,
            a.payload.vbios(s.fw_enable_virt),
            multi_host_interconnect=_node_label(node, labels.MULTI_HOST_INTERCONNECT) == labels.TRUE,
        )
        self.last = decision
        if decision.outcome is policy.FirmwareOutcome.SKIP:
            a.say("firmware", decision.reason)
            return
        if decision.outcome is policy.FirmwareOutcome.REFUSE:
            self._refuse(decision.reason)
            return
        try:
            busy = a.processes.processes()
        except HardwareError as exc:
            self._refuse(f"cannot tell whether GPU workloads run ({exc}); not flashing")
            return
        if busy:
            names = ", ".join(sorted({f"{p.name} ({p.pid})" for p in busy}))
            self._refuse(f"GPU workloads run on this node ({names}); firmware is flashed only on an idle node")
            return
        assert decision.image is not None
        if not self._flashing(node, True):
            return  # the webhook's lock must be visible before the first byte is flashed
        try:
            image = a.payload.install_firmware(decision.image)
            version = a.payload.vbios(s.fw_enable_virt) or ""
            for target in decision.targets:
                a.firmware.flash(target, image)
                remembered.flashed[target] = version
                a.state.write(remembered)
        except HardwareError as exc:
            message = f"firmware upgrade failed: {exc}"
            a.say("firmware", message, logging.ERROR)
            a.publisher.event(driver_plan.FIRMWARE_FAILED, message, warning=True)
            return
        finally:
            self._flashing(a.publisher.node_or_none(a.say), False)
        a.say("firmware", decision.reason)
        # Normal, as seed 001 §3.2.9 shows it: the flash worked, the node waits for its planned reboot
        a.publisher.event(policy.NODE_NEED_REBOOT_REASON, policy.NODE_NEED_REBOOT_MESSAGE)

    def _flashing(self, node: Mapping[str, Any] | None, flashing: bool) -> bool:
        """Set (or remove) `labels.FIRMWARE_FLASHING` on the node; False when it could not be written."""
        if node is None:
            self.say("firmware-lock", "cannot read the node: not flashing without the edit lock", logging.WARNING)
            return False
        try:
            self.publisher.metadata(node, labels=labels.ready_label(labels.FIRMWARE_FLASHING, flashing))
        except ClusterError as exc:
            self.say("firmware-lock", f"cannot label the node {labels.FIRMWARE_FLASHING}: {exc}", logging.WARNING)
            return False
        return True

    def _refuse(self, reason: str) -> None:
        a = self
        if a.say("firmware", f"firmware upgrade refused: {reason}", logging.WARNING):
            a.publisher.event(driver_plan.FIRMWARE_REFUSED, reason, warning=True)


def _node_label(node: Mapping[str, Any] | None, key: str) -> str | None:
    return (((node or {}).get("metadata") or {}).get("labels") or {}).get(key)
