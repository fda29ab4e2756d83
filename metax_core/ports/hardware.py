"""The hardware port: what node agents need from one node's GPUs, kernel and tools.

Every adapter works against a host root path (``/`` on a bare host, the host mount inside a container), so
the same code runs against a fake host. Every failure is raised as `metax_core.errors.HardwareError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from metax_core.inventory import (
    DriverVersion,
    FirmwareInfo,
    GpuHealth,
    GpuLink,
    GpuMetrics,
    GpuProcess,
    ModuleState,
    NetworkInterface,
    PciAddress,
    PciFunction,
)
from metax_core.metrics import telemetry
from metax_core.node import payload_layout


class DeviceInventory(Protocol):
    """Enumerates MetaX PCI functions and the device nodes that give access to them."""

    def functions(self) -> Sequence[PciFunction]:
        """Every MetaX function (PFs and VFs), sorted by PCI address."""
        ...

    def iommu_enabled(self) -> bool:
        """Whether the kernel has an active IOMMU (needed for vfio-pci)."""
        ...

    def device_nodes(self, address: PciAddress) -> Sequence[str]:
        """Container-visible device node paths (``/dev/dri/cardN``, ``/dev/dri/renderDN``, ``/dev/mxcd``,
        ``/dev/vfio/N`` for a vfio-bound function), as absolute paths on the host (not prefixed by the root)."""
        ...


class DriverBinder(Protocol):
    """Moves a PCI function between kernel drivers and sets a PF's SR-IOV VF count."""

    def bind(self, address: PciAddress, driver: str) -> None:
        """Bind ``address`` to ``driver`` (driver_override, unbind, drivers_probe), verifying the result."""
        ...

    def unbind(self, address: PciAddress) -> None:
        """Release ``address`` from its driver and clear driver_override."""
        ...

    def reset_driver(self, address: PciAddress) -> str | None:
        """The way back: clear driver_override, unbind, drivers_probe, so the kernel picks the default
        driver (``metax`` when loaded). Returns the driver bound afterwards (None when none claimed it)."""
        ...

    def set_vf_count(self, pf: PciAddress, count: int, drivers_autoprobe: bool | None = None) -> None:
        """Set sriov_numvfs (through 0 when changing a non-zero count). ``drivers_autoprobe`` (when not None)
        is written to sriov_drivers_autoprobe first: False keeps new VFs unbound (e.g. for vfio-pci)."""
        ...


class KernelModules(Protocol):
    """Loads and inspects kernel modules (``metax``, ``vfio-pci``)."""

    def load(self, name: str, params: Mapping[str, str]) -> None:
        """modprobe (or insmod from a payload path) with parameters; raises when the kernel refuses."""
        ...

    def unload(self, name: str) -> None:
        """rmmod; raises when the module is in use."""
        ...

    def state(self, name: str) -> ModuleState | None:
        """The loaded module's version and parameters, or None when not loaded."""
        ...

    def installed_version(self, name: str) -> DriverVersion | None:
        """Version of the module installed on the host (modinfo), loaded or not; None when absent."""
        ...

    def load_file(self, path: str, params: Mapping[str, str]) -> None:
        """insmod a module file (a driver payload's ``.ko``) with parameters. ``path`` is host-absolute
        (e.g. under ``/var/lib/metax``); raises when the kernel refuses or the module is already loaded."""
        ...

    def running_kernel(self) -> payload_layout.RunningKernel:
        """The running kernel's release and, when an in-tree module of it is installed, its vermagic."""
        ...

    def file_vermagic(self, local_path: str) -> payload_layout.Vermagic:
        """``modinfo -F vermagic`` of a module file in the agent's own filesystem (a payload image's)."""
        ...


class GpuMonitor(Protocol):
    """Health and telemetry of the node's GPUs (mx-smi and sysfs), each call bounded by a timeout."""

    def health(self) -> Mapping[PciAddress, GpuHealth]: ...

    def metrics(self) -> Sequence[GpuMetrics]: ...


class GpuTelemetry(Protocol):
    """Every MetaX function's health and telemetry from one reading (one mx-smi run), for the data-exporter."""

    def telemetry(self) -> telemetry.Telemetry:
        """A function the tool does not report has ``metrics`` None (and its health says why)."""
        ...


class GpuTopology(Protocol):
    """GPU-to-GPU links as the vendor tool sees them (MetaXLink, PCIe switch, NUMA)."""

    def links(self) -> Sequence[GpuLink]: ...


class GpuProcesses(Protocol):
    """Host processes using the GPUs (a driver cannot be unloaded under them)."""

    def processes(self) -> Sequence[GpuProcess]: ...


class Firmware(Protocol):
    """Reads VBIOS/firmware facts and flashes firmware through the vendor tool."""

    def info(self) -> Sequence[FirmwareInfo]: ...

    def flash(self, address: PciAddress, image_path: str) -> None: ...


class NetworkInterfaces(Protocol):
    """The node's network interfaces with their PCI and NUMA placement."""

    def interfaces(self) -> Sequence[NetworkInterface]: ...
