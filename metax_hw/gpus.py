"""GPU health, telemetry, topology and firmware through mx-smi, checked against sysfs.

Why: the device plugin withdraws unhealthy GPUs, the exporter publishes metrics, the topology worker needs
links and the firmware policy (R-FW) needs VBIOS versions — all from one vendor tool that may hang, fail
or print something new. Each call runs mx-smi once with a deadline (`metax_hw.tools`), parses it with
`metax_hw.mxsmi`, and joins it with what the kernel says: a GPU whose config space reads 0xffff has fallen
off the bus whatever the tool claims, a GPU bound to the driver but missing from the tool's table is not
working, and a GPU bound to vfio-pci is judged by sysfs alone (the host tool cannot see it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from metax_core import errors, inventory
from metax_core.health import faults
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import (
    FirmwareInfo,
    FunctionKind,
    GpuHealth,
    GpuLink,
    GpuMetrics,
    GpuProcess,
    PciAddress,
    PciFunction,
)
from metax_core.metrics import telemetry as telemetry_model
from metax_hw import mxsmi, pci, sysfs, tools

logger = logging.getLogger(__name__)

MX_SMI = tools.MX_SMI
FALLEN_OFF = 0xFFFF

FLASH_ARGS: tuple[str, ...] = ("-u", "{image}", "-i", "{index}", "-t", "{seconds}")
"""mx-smi's firmware upgrade (``mx-smi -u <vbios.bin> -i <GPU-ID> -t <s>``); placeholders filled per call."""
FLASH_TIMEOUT = 900.0


class MxSmiMonitor:
    """`GpuMonitor`, `GpuTopology` and `GpuProcesses` from mx-smi, joined with the sysfs inventory."""

    def __init__(
        self, runner: tools.ToolRunner, devices: pci.SysfsDeviceInventory, native_driver: str = inventory.METAX_MODULE
    ) -> None:
        self.runner = runner
        self.devices = devices
        self.native_driver = native_driver

    def is_native(self, function: PciFunction) -> bool:
        return function.driver is not None and function.driver.lower() == self.native_driver.lower()

    def summary(self) -> mxsmi.SmiSummary:
        out = self.runner.run(MX_SMI, [], operation="query GPUs with mx-smi")
        return mxsmi.parse_summary(out.stdout)

    def listed(self, summary: mxsmi.SmiSummary) -> dict[PciAddress, Listed]:
        """What mx-smi's table says of each function it lists."""
        return {g.address: Listed(_metrics(g), faults.state_fault(g.state)) for g in summary.gpus}

    def health(self) -> Mapping[PciAddress, GpuHealth]:
        functions = self.devices.functions()
        listed: dict[PciAddress, Listed] = {}
        if any(self.is_native(f) for f in functions):
            listed = self.listed(self.summary())
        verdicts: dict[PciAddress, GpuHealth] = {}
        for function in functions:  # PFs sort before their VFs (lower device/function numbers)
            verdicts[function.address] = judge(self.devices, self.is_native, function, listed, verdicts, "mx-smi")
        return verdicts

    def metrics(self) -> Sequence[GpuMetrics]:
        if not any(self.is_native(f) for f in self.devices.functions()):
            return []
        return sorted((_metrics(gpu) for gpu in self.summary().gpus), key=lambda m: m.address)

    def telemetry(self) -> telemetry_model.Telemetry:
        """`GpuTelemetry`: the sysfs functions, one mx-smi run, health judged as `health` does."""
        functions = self.devices.functions()
        summary = mxsmi.SmiSummary(header=mxsmi.SmiHeader(), gpus=())
        if any(self.is_native(f) for f in functions):
            summary = self.summary()
        header = summary.header
        return join_telemetry(
            self.devices,
            self.is_native,
            functions,
            self.listed(summary),
            "mx-smi",
            versions=(header.driver_version, header.maca_version, header.bios_version),
        )

    def processes(self) -> Sequence[GpuProcess]:
        if not any(self.is_native(f) for f in self.devices.functions()):
            return []
        summary = self.summary()
        by_index = {g.index: g.address for g in summary.gpus}
        return [
            GpuProcess(address=by_index[p.gpu_index], pid=p.pid, name=p.name, memory_used_bytes=p.memory_used_bytes)
            for p in summary.processes
            if p.gpu_index in by_index
        ]

    def links(self) -> Sequence[GpuLink]:
        if not any(self.is_native(f) for f in self.devices.functions()):
            return []
        by_label = {f"GPU{g.index}": g.address for g in self.summary().gpus}
        out = self.runner.run(MX_SMI, ["topo", "-m"], operation="query GPU topology with mx-smi")
        topology = mxsmi.parse_topology(out.stdout)
        links: list[GpuLink] = []
        for (row, column), kind in sorted(topology.links.items()):
            a, b = by_label.get(row), by_label.get(column)
            if a is None or b is None or not a < b:
                continue
            links.append(GpuLink(a=a, b=b, kind=kind))
        return links


@attrs.frozen
class Listed:
    """A function as the vendor tool (mx-smi) or library (libmxsml) reports it, whichever read it."""

    metrics: GpuMetrics | None
    """None: listed but not answering (a library call on it failed)."""
    problem: Fault | None = None
    """What is wrong with it by the tool's own word (its state, a failing call); None when nothing."""


def judge(
    devices: pci.SysfsDeviceInventory,
    is_native: Callable[[PciFunction], bool],
    function: PciFunction,
    listed: Mapping[PciAddress, Listed],
    earlier: Mapping[PciAddress, GpuHealth],
    source: str,
) -> GpuHealth:
    """One function's health: sysfs first (fallen off the bus, no driver, not the native driver), then what
    ``source`` (the tool or library that produced ``listed``) says of it and its telemetry (`faults`), and its
    PCIe link; a VF it omits follows its PF."""
    address = function.address
    if devices.config_vendor(address) == FALLEN_OFF:
        return GpuHealth(address, (Fault(FaultKind.FELL_OFF_BUS, "config space reads 0xffff"),))
    if function.driver is None:
        return GpuHealth(address, (Fault(FaultKind.NO_DRIVER, "no driver bound"),))
    try:
        link = faults.link_fault(devices.link(address))
    except errors.HardwareError as exc:  # a link that cannot be read is no fault of the GPU's
        logger.debug("cannot read the PCIe link of %s: %s", address, exc)
        link = None
    found = (link,) if link is not None else ()
    if not is_native(function):
        return GpuHealth(address, found, f"bound to {function.driver}; judged by sysfs only")
    gpu = listed.get(address)
    if gpu is None:
        parent = earlier.get(function.physfn) if function.physfn is not None else None
        if parent is not None:
            # Whether the tool lists VFs on the host is not documented: a VF it omits follows its PF.
            return GpuHealth(address, parent.faults + found, f"VF not listed by {source}")
        return GpuHealth(address, (Fault(FaultKind.NOT_ANSWERING, f"bound to the driver but not listed by {source}"),))
    if gpu.problem is not None:
        found = (gpu.problem, *found)
    if gpu.metrics is not None:
        m = gpu.metrics
        found = (*found, *faults.reading_faults(m.temperature_celsius, m.power_milliwatts, m.power_cap_milliwatts))
    return GpuHealth(address, found)


def join_telemetry(
    devices: pci.SysfsDeviceInventory,
    is_native: Callable[[PciFunction], bool],
    functions: Sequence[PciFunction],
    listed: Mapping[PciAddress, Listed],
    source: str,
    versions: tuple[str | None, str | None, str | None],
) -> telemetry_model.Telemetry:
    """`GpuTelemetry` from the sysfs functions and one reading of the tool or library (``listed``):
    every function, its health (`judge`) and its telemetry when the reading has it.
    ``versions``: driver, MACA, BIOS."""
    verdicts: dict[PciAddress, GpuHealth] = {}
    readings: list[telemetry_model.GpuReading] = []
    for function in functions:  # PFs sort before their VFs
        verdicts[function.address] = judge(devices, is_native, function, listed, verdicts, source)
        gpu = listed.get(function.address) if is_native(function) else None
        readings.append(telemetry_model.GpuReading(function, verdicts[function.address], gpu.metrics if gpu else None))
    driver, maca, bios = versions
    return telemetry_model.Telemetry(gpus=tuple(readings), driver_version=driver, maca_version=maca, bios_version=bios)


def open_monitor(
    root: Path | str = "/",
    *,
    native_driver: str = inventory.METAX_MODULE,
    timeout: float = tools.DEFAULT_TIMEOUT,
) -> MxSmiMonitor:
    """Only what the data-exporter needs of the host at ``root`` (the PCI inventory and mx-smi), without the
    other adapters `metax_hw.host.open_host` builds and imports (the exporter's memory, docs/exporter.md)."""
    tree = sysfs.mounted_tree(root)
    devices = pci.SysfsDeviceInventory(tree, inventory.METAX_VENDOR_ID, None)
    runner = tools.ToolRunner(tools.driver_tools_path(tree.root), tools.ExecMode.DIRECT, timeout)
    return MxSmiMonitor(runner, devices, native_driver)


def _metrics(gpu: mxsmi.SmiGpu) -> GpuMetrics:
    return GpuMetrics(
        address=gpu.address,
        index=gpu.index,
        name=gpu.name,
        utilization_percent=gpu.utilization_percent,
        temperature_celsius=gpu.temperature_celsius,
        power_milliwatts=gpu.power_watts * 1000 if gpu.power_watts is not None else None,
        power_cap_milliwatts=gpu.power_cap_watts * 1000 if gpu.power_cap_watts is not None else None,
        memory_used_bytes=gpu.memory_used_bytes,
        memory_total_bytes=gpu.memory_total_bytes,
    )


class MxSmiFirmware:
    """`Firmware`: VBIOS versions from ``mx-smi --show-version`` (header as fallback), flashing with ``-u``."""

    def __init__(
        self,
        runner: tools.ToolRunner,
        devices: pci.SysfsDeviceInventory,
        monitor: MxSmiMonitor,
        flash_args: Sequence[str] = FLASH_ARGS,
        flash_timeout: float = FLASH_TIMEOUT,
    ) -> None:
        self.runner = runner
        self.devices = devices
        self.monitor = monitor
        self.flash_args = tuple(flash_args)
        self.flash_timeout = flash_timeout

    def info(self) -> Sequence[FirmwareInfo]:
        pfs = [f for f in self.devices.functions() if f.kind is FunctionKind.PF and self.monitor.is_native(f)]
        if not pfs:
            return []
        summary = self.monitor.summary()
        out = self.runner.run(MX_SMI, ["--show-version"], operation="read firmware versions with mx-smi")
        versions = mxsmi.parse_versions(out.stdout)
        listed = {g.address for g in summary.gpus}
        found: list[FirmwareInfo] = []
        for pf in pfs:
            version = versions.get(pf.address)
            if version is None and pf.address in listed and len(summary.gpus) == 1:
                version = summary.header.bios_version
            if version is None:
                raise errors.HardwareError("read firmware version", pf.address, "mx-smi reports no BIOS version for it")
            # An SR-IOV capability is what the virtualisation firmware adds (001 §3.2.9: VFs need it).
            found.append(FirmwareInfo(address=pf.address, vbios_version=version, virtualization=pf.sriov_totalvfs > 0))
        return found

    def flash(self, address: PciAddress, image_path: str) -> None:
        op = "flash firmware"
        function = self.devices.function(address)
        if function.kind is not FunctionKind.PF:
            raise errors.HardwareError(op, address, "firmware can be flashed on a PF only, not on a VF")
        if not self.devices.tree.path(image_path).is_file():
            raise errors.HardwareError(op, address, f"firmware image {image_path} does not exist on the host")
        index = {g.address: g.index for g in self.monitor.summary().gpus}.get(address)
        if index is None:
            raise errors.HardwareError(op, address, "mx-smi does not list this GPU (is the driver bound?)")
        image = image_path if self.runner.mode is tools.ExecMode.HOST else str(self.devices.tree.path(image_path))
        values = {"image": image, "index": str(index), "address": address, "seconds": f"{self.flash_timeout:.0f}"}
        args = [a.format(**values) for a in self.flash_args]
        out = self.runner.run(MX_SMI, args, operation=op, device=address, timeout=self.flash_timeout + 30)
        if re.search(r"\b(fail|failed|error)\b", out.stdout, re.IGNORECASE):
            raise errors.HardwareError(op, address, f"mx-smi reported: {out.stdout.strip()[-500:]}")
        logger.info("flashed %s with %s", address, image_path)
