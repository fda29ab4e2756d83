"""What a node's hardware looks like, in the operator's own words.

These frozen records are what the hardware port returns and what the core's decisions (labels, VFIO
selection, device-plugin devices, topology) take. Parsing sysfs or mx-smi into them happens in adapters.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NewType

import attrs

PciAddress = NewType("PciAddress", str)
"""A full PCI address in sysfs form, e.g. ``0000:09:00.0``. Sorting these strings sorts by domain/bus/dev/fn."""

DriverVersion = NewType("DriverVersion", str)

METAX_VENDOR_ID = 0x9999
METAX_MODULE = "metax"
VFIO_DRIVER = "vfio-pci"


class FunctionKind(enum.Enum):
    """Whether a PCI function is a physical GPU or an SR-IOV virtual function of one."""

    PF = "pf"
    VF = "vf"


@attrs.frozen
class PciFunction:
    """One MetaX PCI function (a whole GPU, or one of its SR-IOV VFs) as the kernel shows it."""

    address: PciAddress
    vendor_id: int
    device_id: int
    kind: FunctionKind = FunctionKind.PF
    physfn: PciAddress | None = None
    """For a VF, the PF it belongs to."""
    numa_node: int | None = None
    """None when the kernel reports -1 (no NUMA information)."""
    iommu_group: int | None = None
    driver: str | None = None
    """Name of the bound kernel driver (``metax``, ``vfio-pci``) or None when unbound."""
    sriov_totalvfs: int = 0
    sriov_numvfs: int = 0
    pcie_path: tuple[PciAddress, ...] = ()
    """Bridges from the root port down to this function (exclusive); equal prefixes mean a shared switch."""
    driver_override: str | None = None
    """The driver forced through ``driver_override`` (None when unset), e.g. ``vfio-pci`` after a VFIO bind."""
    vfs: tuple[PciAddress, ...] = ()
    """For a PF, its enabled VFs in ``virtfnN`` order."""


# -- health: what a reading shows (the rules that judge it: `metax_core.health`) --------------------------------


class Severity(enum.IntEnum):
    """How bad a GPU's state is; a GPU's severity is its worst fault's."""

    FINE = 0
    DEGRADED = 1
    UNUSABLE = 2

    @property
    def word(self) -> str:
        return self.name.lower()

    @classmethod
    def from_word(cls, word: str) -> Severity:
        try:
            return cls[word.upper()]
        except KeyError:
            raise ValueError(f"severity {word!r} is not one of {', '.join(s.word for s in cls)}") from None


class FaultKind(enum.Enum):
    """A kind of fault, by the name every consumer shows (metric label, taint value, condition, Event)."""

    FELL_OFF_BUS = "FellOffBus"
    """Its PCI config space reads 0xffff: it no longer answers on the bus."""
    NO_DRIVER = "NoDriver"
    """No kernel driver is bound to it."""
    NOT_ANSWERING = "NotAnswering"
    """Bound to the driver, but the vendor tool does not list it, or a library call on it fails (a hung GPU)."""
    STATE = "StateFault"
    """The vendor tool's own state for it says it failed (unavailable, error, hang, reset, lost, ...)."""
    THERMAL = "Thermal"
    """Its hotspot temperature is at or above the limit."""
    POWER = "PowerOverLimit"
    """Its board power is above its power limit by more than the tolerance."""
    LINK = "LinkDegraded"
    """Its PCIe link trained below the speed or width it is capable of."""
    HEALTH_UNKNOWN = "HealthUnknown"
    """The health tool has not answered for longer than the grace period."""

    @property
    def severity(self) -> Severity:
        return SEVERITY[self]

    @classmethod
    def from_name(cls, name: str) -> FaultKind:
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"fault kind {name!r} is not one of {', '.join(k.value for k in cls)}") from None


SEVERITY: Mapping[FaultKind, Severity] = {
    FaultKind.FELL_OFF_BUS: Severity.UNUSABLE,
    FaultKind.NO_DRIVER: Severity.UNUSABLE,
    FaultKind.NOT_ANSWERING: Severity.UNUSABLE,
    FaultKind.STATE: Severity.UNUSABLE,
    FaultKind.THERMAL: Severity.DEGRADED,
    FaultKind.POWER: Severity.DEGRADED,
    FaultKind.LINK: Severity.DEGRADED,
    FaultKind.HEALTH_UNKNOWN: Severity.DEGRADED,
}


@attrs.frozen(order=True)
class Fault:
    """One fault a reading showed on one function, with what the hardware said."""

    kind: FaultKind = attrs.field(order=lambda k: k.value)
    detail: str = ""

    @property
    def severity(self) -> Severity:
        return self.kind.severity

    def describe(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value


def worst(faults: tuple[Fault, ...] | list[Fault]) -> Severity:
    """The severity of a GPU with ``faults`` (FINE when none)."""
    return max((f.severity for f in faults), default=Severity.FINE)


@attrs.frozen
class GpuHealth:
    """Health of one function as one reading of the hardware shows it (`metax_core.health.faults`); whether
    that counts is the verdict's business (`metax_core.health.verdict`)."""

    address: PciAddress
    faults: tuple[Fault, ...] = ()
    note: str = ""
    """What the reading says beyond its faults (e.g. "judged by sysfs only")."""

    @property
    def healthy(self) -> bool:
        return not self.faults

    @property
    def reason(self) -> str:
        return "; ".join(f.describe() for f in self.faults) or self.note


@attrs.frozen
class GpuMetrics:
    """One sample of a GPU's telemetry. A None field means the hardware did not report it."""

    address: PciAddress
    index: int
    name: str = ""
    utilization_percent: float | None = None
    temperature_celsius: float | None = None
    power_milliwatts: float | None = None
    power_cap_milliwatts: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    xtt_used_bytes: int | None = None
    """System memory mapped for the GPU (GTT/"xtt"); libmxsml reports it, mx-smi's summary does not."""
    xtt_total_bytes: int | None = None
    uuid: str = ""
    """The GPU's UUID as libmxsml reports it (mx-smi's summary does not print one)."""


@attrs.frozen
class ModuleState:
    """A loaded kernel module: its version and its parameters as /sys/module/<name> shows them."""

    name: str
    version: DriverVersion | None
    params: Mapping[str, str] = attrs.field(factory=dict)
    refcount: int | None = None
    """Users of the module (``/sys/module/<name>/refcnt``); a module in use cannot be unloaded."""


@attrs.frozen
class FirmwareInfo:
    """Firmware facts of one PF, needed by the firmware policy (R-FW)."""

    address: PciAddress
    vbios_version: str
    virtualization: bool
    """True when the flashed firmware is the virtualisation build."""


@attrs.frozen
class NetworkInterface:
    """A host network interface and where it sits, for GPU–NIC affinity."""

    name: str
    pci_address: PciAddress | None = None
    numa_node: int | None = None
    mac: str | None = None
    up: bool = False
    pcie_path: tuple[PciAddress, ...] = ()
    """Bridges from the root port down to the NIC's function (exclusive), as `PciFunction.pcie_path`."""


class LinkKind(enum.Enum):
    """How two GPUs reach each other, in the vocabulary of ``mx-smi topo -m`` (best first)."""

    MX = "MX"
    """MetaXLink, the GPU-to-GPU fabric."""
    PIX = "PIX"
    """Through at most one PCIe bridge."""
    PXB = "PXB"
    """Through several PCIe bridges, not the host bridge."""
    PHB = "PHB"
    """Through a PCIe host bridge."""
    NODE = "NODE"
    """Between host bridges of one NUMA node."""
    SYS = "SYS"
    """Across the SMP interconnect between NUMA nodes."""
    ETH = "ETH"
    NA = "NA"
    """Unknown to the tool."""


@attrs.frozen
class GpuLink:
    """The connection between two GPUs, as the vendor tool reports it (one record per unordered pair)."""

    a: PciAddress
    b: PciAddress
    kind: LinkKind


@attrs.frozen
class GpuProcess:
    """A host process holding GPU memory (from the tool's process table)."""

    address: PciAddress
    pid: int
    name: str
    memory_used_bytes: int | None = None
