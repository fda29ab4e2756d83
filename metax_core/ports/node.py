"""The node-side ports: what node agents need from their host and from kubelet, beyond the hardware.

`ReadinessBoard` is where agents publish their readiness (R-READY) and gpu-device reads it; `ResourcePlugin`
is one device-plugin resource served to kubelet; `AllocationBackend` is what a plugin server asks when
kubelet allocates (the gpu-device agent implements it); `CdiSink` is where the CDI spec goes. `ClaimPreparer`
and `HealthFeed` are what the DRA plugin server asks (the dra-driver agent implements them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from metax_core.dra import model as dra
from metax_core.dra import prepare as dra_prepare
from metax_core.node import devices
from metax_core.node.readiness import ComponentReadiness


class ReadinessBoard(Protocol):
    """Where node agents publish their readiness and gpu-device reads it (a directory of files on the host)."""

    def publish(self, signal: ComponentReadiness) -> None: ...

    def withdraw(self, component: str) -> None:
        """Remove the component's signal (on uninstall): it then counts as missing."""
        ...

    def read_all(self) -> Mapping[str, ComponentReadiness]:
        """Every readable signal by component; unreadable ones are left out (and so count as missing)."""
        ...


class ServiceManager(Protocol):
    """What (re)starts the node's container runtime: systemd on a node, the test harness's supervisor in tests.

    containerd has no reload (SIGHUP stops it), so a changed configuration takes a restart through whatever
    supervises it. Failures are HardwareErrors naming the service."""

    @property
    def name(self) -> str: ...

    def restart(self, unit: str) -> None:
        """Restart the service ``unit`` (``containerd``, ``docker``, ``crio``) and return once it was started."""
        ...


class ResourcePlugin(Protocol):
    """One resource's plugin server (`metax_k8s.deviceplugin.server.PluginServer`); failures are PortErrors."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def serving(self) -> bool: ...

    def probe(self) -> bool: ...

    def register(self) -> None: ...

    def update(self, advertised: Sequence[devices.Device]) -> bool: ...


class CdiSink(Protocol):
    """Where the CDI spec goes (`metax_hw.hostfiles.CdiSpecFile`); failures are HardwareErrors."""

    def write(self, spec: Mapping[str, Any] | None) -> bool:
        """Make the spec on disk ``spec`` (None: no spec), durably, before returning."""
        ...

    def read(self) -> Mapping[str, Any] | None:
        """The spec on disk now; None when there is none."""
        ...

    def remove(self) -> bool: ...


class AllocationBackend(Protocol):
    """Answers the calls that need the node's current devices (implemented by the gpu-device service)."""

    def allocate(self, resource: devices.Resource, ids: Sequence[str]) -> devices.ContainerAllocation:
        """Raise `devices.AllocationRefused` for devices that cannot be handed out."""
        ...

    def preferred(
        self, resource: devices.Resource, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str]: ...


class ClaimPreparer(Protocol):
    """Answers the kubelet's DRA calls (implemented by the dra-driver service).

    Both calls are idempotent (the kubelet retries) and may come concurrently; every claim asked about gets
    an entry in the answer, also one the driver does not know (unprepare: nothing to undo, no error)."""

    def prepare(self, claims: Sequence[dra.ClaimRef]) -> Mapping[str, dra.ClaimOutcome]:
        """Outcome per claim uid."""
        ...

    def unprepare(self, claims: Sequence[dra.ClaimRef]) -> Mapping[str, str]:
        """Error per claim uid ("" when undone or nothing was prepared)."""
        ...


class HealthFeed(Protocol):
    """The devices' health for `DRAResourceHealth.NodeWatchResources` (implemented by the dra-driver service)."""

    def current(self) -> tuple[Sequence[dra.DeviceHealthReport], int]:
        """Every published device's latest report and a version that grows with each change."""
        ...

    def wait_changed(self, version: int, timeout: float) -> bool:
        """Block until the version is past ``version`` (True) or ``timeout`` seconds passed (False)."""
        ...


class ClaimStore(Protocol):
    """The DRA driver's host state (`metax_hw.claim_store.HostClaimStore`): per-claim CDI spec files, the
    checkpoint of prepared claims, the installed SDK versions. Failures are HardwareErrors; every write is
    durable before it returns."""

    def write_spec(self, claim_uid: str, spec: Mapping[str, Any]) -> None: ...

    def remove_spec(self, claim_uid: str) -> None:
        """Remove the claim's spec file; nothing to do when there is none."""
        ...

    def has_spec(self, claim_uid: str) -> bool: ...

    def load_checkpoint(self) -> dra_prepare.Checkpoint:
        """The checkpoint on disk (empty when there is none); InvalidSpec when it is unreadable."""
        ...

    def save_checkpoint(self, checkpoint: dra_prepare.Checkpoint) -> None: ...

    def installed_sdks(self) -> tuple[str, ...]:
        """Names of the installed MXMACA versions (`metax_core.runtime.sdk.installed`)."""
        ...
