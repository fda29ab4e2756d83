"""The node-side ports: what node agents need from their host and from kubelet, beyond the hardware.

`ReadinessBoard` is where agents publish their readiness (R-READY) and gpu-device reads it; `ResourcePlugin`
is one device-plugin resource served to kubelet; `AllocationBackend` is what a plugin server asks when
kubelet allocates (the gpu-device agent implements it); `CdiSink` is where the CDI spec goes. `ClaimPreparer`
and `HealthFeed` are what the DRA plugin server asks (the dra-driver agent implements them).

The host-file ports (issue 43): every file a node agent keeps on the host goes through one of them, so `services/`
only calls and decides, the real adapter (`metax_hw`) writes atomically, and an in-memory fake (`metax_hw_fake`)
stands in for it in fast tests; `tests/contract/hardware/test_host_files.py` runs the same cases against both.
`SdkStore` is maca's MXMACA versions and the in-use records; `ContainerEditHost` is what the edit service reads
and records per container; `DriverPayload` is the driver image's payload and its copies on the host;
`DriverStateStore` and `DriverBaselineStore` are driver-manager's records; `VfioLoadMarker` is vfio-manager's;
`RuntimeFiles` is the container runtime's configuration files as container-runtime edits them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from metax_core import versions
from metax_core.dra import model as dra
from metax_core.dra import prepare as dra_prepare
from metax_core.node import devices, driver_state, payload_layout, policy, uninstall
from metax_core.node.readiness import ComponentReadiness
from metax_core.runtime import container_edit, record, sdk


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


class SdkStore(Protocol):
    """maca's MXMACA versions on the host and the edit service's in-use records (`metax_core.runtime.sdk`'s
    removal protocol). Every step is restartable: an install is a hidden copy renamed into place, a removal hides
    the version before the records are read again. Failures are HardwareErrors."""

    def installed(self) -> list[versions.Version]: ...

    def clean(self) -> list[str]:
        """Remove what an interrupted install left, put back what an interrupted removal hid; what was done."""
        ...

    def install(self, want: sdk.Wanted) -> None:
        """Copy the payload's SDK into place (nothing when another round finished it first)."""
        ...

    def hide(self, version: versions.Version) -> None: ...

    def unhide(self, version: versions.Version) -> None: ...

    def uses(self) -> tuple[list[sdk.Use], list[str]]:
        """(records of live containers, record names of gone or unreadable ones), removing nothing."""
        ...

    def forget(self, names: Sequence[str]) -> None:
        """Remove these records (names `uses` returned)."""
        ...

    def remove(self, version: versions.Version) -> bool:
        """Hide, re-read the records, remove unless a live container uses it; True when removed."""
        ...

    def tidy(self) -> None:
        """The uninstall's last step: the records' directory goes, and the versions' directory when empty."""
        ...


class ContainerEditHost(Protocol):
    """What container-edit reads from the host for one container's edit, and the in-use record it writes."""

    def installed(self) -> tuple[versions.Version, ...]: ...

    def cdi_spec(self) -> Mapping[str, Any] | None:
        """The node's MetaX CDI spec; None when absent or unreadable (the edit then refuses CDI requests)."""
        ...

    def device_info(self, paths: Sequence[str]) -> Mapping[str, container_edit.DeviceInfo]:
        """Kind and numbers of each host device node path that exists and is a device."""
        ...

    def record_use(self, use: sdk.Use) -> None:
        """Write the container's in-use record (a reader sees the whole record or none)."""
        ...

    def has_version(self, name: str) -> bool:
        """Whether version directory ``name`` is installed (not hidden for removal)."""
        ...


class DriverPayload(Protocol):
    """The driver image's payload (its ``.ko`` files, user space and firmware) and the copies driver-manager
    makes of it on the host, each versioned and immutable, made in one rename (`metax_core.node.payload_layout`)."""

    def modules(self, vermagic: Callable[[str], payload_layout.Vermagic]) -> list[payload_layout.PayloadModule]:
        """Every ``metax.ko`` of the payload with its vermagic (``vermagic`` reads one file: a HardwareError
        becomes the module's error)."""
        ...

    def install_driver(self, version: str, choice: payload_layout.ModuleChoice) -> str:
        """Copy the chosen kernel's ``.ko`` files to the host; the module's host-absolute path."""
        ...

    def install_user_space(self, version: str) -> bool:
        """Stage ``bin/`` and ``lib/`` as ``version``'s on the host; False when the payload brings neither."""
        ...

    def point_current(self, running_version: str | None) -> str | None:
        """Point `payload_layout.HOST_CURRENT` at the running driver's user space (or remove it); its target."""
        ...

    def vbios(self, enable_virt: bool) -> str | None:
        """The VBIOS version of the payload's firmware image of this build; None when it brings none."""
        ...

    def install_firmware(self, image: policy.FirmwareImage) -> str:
        """Copy the payload's firmware image to the host; its host-absolute path."""
        ...


class DriverStateStore(Protocol):
    """driver-manager's memory between runs (`metax_core.node.driver_state`); an unreadable file reads as empty."""

    def read(self) -> driver_state.HostState: ...

    def write(self, state: driver_state.HostState) -> None:
        """Durable and atomic; OSError-free: failures are HardwareErrors."""
        ...


class DriverBaselineStore(Protocol):
    """driver-manager's first-touch record (`uninstall.Baseline`) and the host paths under `uninstall.OWNED_DIRS`."""

    def exists(self) -> bool: ...

    def read(self) -> uninstall.Baseline | None:
        """The record; None when there is none or it is unreadable (logged: nothing to restore)."""
        ...

    def write(self, baseline: uninstall.Baseline) -> None: ...

    def owned_paths(self) -> list[str]:
        """Every path under `uninstall.OWNED_DIRS`, the directories themselves included, host-root relative."""
        ...

    def remove(self, paths: Sequence[str]) -> list[str]:
        """Remove each path (a directory with its content); what could not be removed and why."""
        ...


class VfioLoadMarker(Protocol):
    """ "vfio-manager loaded vfio-pci", recorded on the host before the load and removed by the undo."""

    def present(self) -> bool: ...

    def mark(self) -> None: ...

    def clear(self) -> None:
        """Remove the marker (and its directory when empty); HardwareError when it cannot be removed."""
        ...


class RuntimeFiles(Protocol):
    """The container runtime's files as container-runtime edits them (host paths, absolute): every write whole
    (a temporary renamed over the file), a rewritten file keeps its mode and owner. Failures are HardwareErrors."""

    def stage_outside(self, directory: str) -> None:
        """A runtime reads every file of ``directory``: a write's temporary goes to its parent instead."""
        ...

    def read(self, path: str) -> str | None: ...

    def stat(self, path: str) -> record.FileMode | None: ...

    def write(self, path: str, text: str, mode: record.FileMode | None = None) -> None: ...

    def put(self, path: str, text: str | None, mode: record.FileMode | None = None) -> None:
        """Make the file ``text`` (None: no file); written only when it differs."""
        ...

    def remove(self, path: str) -> None: ...

    def glob(self, pattern: str) -> tuple[str, ...]:
        """The paths matching ``pattern`` as Go's ``filepath.Glob`` finds them (containerd's imports)."""
        ...

    def scratch(self, path: str, text: str) -> str:
        """A private temporary sibling of ``path`` holding ``text``; its host path (`clean_temporaries` removes
        one a kill left)."""
        ...

    def missing_dirs(self, path: str) -> tuple[str, ...]:
        """The directories a write of ``path`` would create, outermost first."""
        ...

    def remove_dir_if_empty(self, path: str) -> None: ...

    def install_wrapper(self, source: str, path: str) -> bool:
        """Copy the local file ``source`` to ``path`` (executable) unless it is there already; True when copied."""
        ...

    def wrapper_ok(self, path: str) -> bool: ...

    def clean_temporaries(self, path: str) -> None:
        """Remove the temporaries a write of ``path`` killed midway left."""
        ...

    def clean_partials(self, directory: str) -> None:
        """Remove the leftovers of a wrapper copy killed midway."""
        ...

    def stamp(self, path: str) -> tuple[int, int, int] | None:
        """What changes when the file does (inode, size, modification time); None when unreadable."""
        ...
