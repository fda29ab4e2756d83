"""GPU telemetry through libmxsml (MetaX's System Management Library), loaded with ctypes, as mx-exporter reads it.

Why: mx-smi is a program the sampler has to spawn and whose text it has to parse; the library answers the same
questions in-process, with numbers instead of text, and is what MetaX's own exporter uses. `MxSmlMonitor` is the
hardware port's `GpuTelemetry`, joined with sysfs exactly as the mx-smi adapter is (`gpus.join_telemetry`), so
the exporter does not know which one it got (tests/contract/hardware/test_telemetry_sources.py).

Only the subset the exporter needs is bound: init, device and PF counts, per-device identity (bus id, UUID,
name, virtualisation mode), GPU (Xcore) utilisation, memory (vram, xtt), board power and its limit, hotspot
temperature, device state, driver/BIOS/MACA versions. Units as the library reports them: memory in KiB,
power in milliwatts, temperature in hundredths of a degree Celsius. A call that does not return
``MXSML_Success`` raises `HardwareError` naming the call and its return code; ``MXSML_OperationNotSupport``
on a per-device value means "no value" (a VF has no board power), not an error.
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

from metax_core import errors, inventory
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import GpuMetrics, PciAddress, PciFunction
from metax_core.metrics import telemetry as telemetry_model
from metax_hw import gpus, pci

log = logging.getLogger(__name__)

SOURCE = "libmxsml"

SUCCESS = 0
NOT_SUPPORTED = 3
RETURN_CODES = (
    "MXSML_Success",
    "MXSML_Failure",
    "MXSML_NoDevice",
    "MXSML_OperationNotSupport",
    "MXSML_SysfsError",
    "MXSML_SysfsWriteError",
    "MXSML_InvalidDeviceId",
    "MXSML_InvalidDieId",
    "MXSML_PermissionDenied",
    "MXSML_InvalidInput",
    "MXSML_InsufficientSize",
    "MXSML_Reserved3",
    "MXSML_IOControlFailure",
    "MXSML_MmapFailure",
    "MXSML_UnMmapFailure",
    "MXSML_InvalidInputForMmap",
    "MXSML_Reserved1",
    "MXSML_Reserved2",
    "MXSML_TargetVfNotFound",
    "MXSML_InvalidFrequency",
    "MXSML_FlrNotReady",
    "MXSML_OpenDeviceFileFailure",
    "MXSML_CloseDeviceFileFailure",
    "MXSML_BusyDevice",
    "MXSML_MmioNotEnough",
    "MXSML_GetPciBridgeFailure",
    "MXSML_LoadDllFailure",
)
"""``mxSmlReturn_t`` by value."""

USAGE_XCORE = 4
"""``MXSML_Usage_Xcore``: the compute cores (mx-exporter's ``gpu_usage`` on C-class GPUs)."""
TEMPERATURE_HOTSPOT = 0
VERSION_BIOS = 0
VERSION_DRIVER = 1
PF_FIRST_ID = 100
"""PFs of an SR-IOV host have device ids from 100 (``mxSmlGetPfDeviceCount`` of them)."""
MAX_BOARD_WAYS = 8
_TEXT = 128

_BDF = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


class DeviceInfo(ctypes.Structure):
    """``mxSmlDeviceInfo_t``."""

    _fields_ = [
        ("deviceId", ctypes.c_uint),
        ("type", ctypes.c_uint),
        ("bdfId", ctypes.c_char * 32),
        ("gpuId", ctypes.c_uint),
        ("nodeId", ctypes.c_uint),
        ("uuid", ctypes.c_char * 96),
        ("brand", ctypes.c_uint),
        ("mode", ctypes.c_uint),
        ("deviceName", ctypes.c_char * 32),
    ]


class MemoryInfo(ctypes.Structure):
    """``mxSmlMemoryInfo_t``, KiB."""

    _fields_ = [
        ("visVramTotal", ctypes.c_long),
        ("visVramUse", ctypes.c_long),
        ("vramTotal", ctypes.c_long),
        ("vramUse", ctypes.c_long),
        ("xttTotal", ctypes.c_long),
        ("xttUse", ctypes.c_long),
    ]


class BoardWayElectricInfo(ctypes.Structure):
    """``mxSmlBoardWayElectricInfo_t``: one power input of the board (power in milliwatts)."""

    _fields_ = [("voltage", ctypes.c_uint), ("current", ctypes.c_uint), ("power", ctypes.c_uint)]


_U = ctypes.c_uint
_P = ctypes.POINTER
_SIGNATURES: dict[str, tuple[type, list[type]]] = {
    "mxSmlInit": (_U, []),
    "mxSmlGetErrorString": (ctypes.c_char_p, [_U]),
    "mxSmlGetDeviceCount": (_U, []),
    "mxSmlGetPfDeviceCount": (_U, []),
    "mxSmlGetDeviceInfo": (_U, [_U, _P(DeviceInfo)]),
    "mxSmlGetDeviceIpUsage": (_U, [_U, _U, _P(ctypes.c_int)]),
    "mxSmlGetMemoryInfo": (_U, [_U, _P(MemoryInfo)]),
    "mxSmlGetBoardPowerInfo": (_U, [_U, _P(_U), _P(BoardWayElectricInfo)]),
    "mxSmlGetBoardPowerLimit": (_U, [_U, _P(_U)]),
    "mxSmlGetTemperatureInfo": (_U, [_U, _U, _P(ctypes.c_int)]),
    "mxSmlGetDeviceState": (_U, [_U, _P(ctypes.c_int)]),
    "mxSmlGetDeviceVersion": (_U, [_U, _U, ctypes.c_char_p, _P(_U)]),
    "mxSmlGetMacaVersion": (_U, [ctypes.c_char_p, _P(_U)]),
}
_OPTIONAL = frozenset({"mxSmlGetPfDeviceCount", "mxSmlGetBoardPowerLimit", "mxSmlGetDeviceState"})
"""Calls older libraries lack: their values are then absent (no PFs at 100+, no limit, state from the calls)."""


def code_name(code: int) -> str:
    return RETURN_CODES[code] if 0 <= code < len(RETURN_CODES) else f"unknown code {code}"


def parse_bdf(text: str) -> PciAddress:
    """``mxSmlDeviceInfo_t.bdfId`` as a PCI address (the domain defaults to 0000)."""
    match = _BDF.match(text.strip())
    if match is None:
        raise errors.HardwareError(f"{SOURCE} mxSmlGetDeviceInfo", None, f"bdfId {text!r} is not a PCI address")
    domain, bus, device, function = match.groups()
    return PciAddress(f"{(domain or '0000').lower()}:{bus.lower()}:{device.lower()}.{function}")


class Library:
    """The loaded library: one method per bound call, each raising `HardwareError` on a failing return code."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise errors.HardwareError(f"load {SOURCE}", None, f"{path}: {exc}") from exc
        self._calls: dict[str, Any] = {}
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(self._lib, name)
            except AttributeError as exc:
                if name in _OPTIONAL:
                    continue
                raise errors.HardwareError(f"load {SOURCE}", None, f"{path} has no {name}") from exc
            fn.restype, fn.argtypes = restype, argtypes
            self._calls[name] = fn

    def has(self, name: str) -> bool:
        return name in self._calls

    def _check(self, name: str, code: int, device: int | None = None) -> None:
        if code == SUCCESS:
            return
        text = self._calls["mxSmlGetErrorString"](code)
        said = f": {text.decode(errors='replace')}" if text else ""
        where = f"device {device}" if device is not None else None
        raise errors.HardwareError(f"{SOURCE} {name}", where, f"returned {code} ({code_name(code)}){said}")

    def _value(self, name: str, device: int, *args: object) -> bool:
        """Call a per-device getter; False when the device does not support it."""
        code = int(self._calls[name](device, *args))
        if code == NOT_SUPPORTED:
            return False
        self._check(name, code, device)
        return True

    def init(self) -> None:
        self._check("mxSmlInit", int(self._calls["mxSmlInit"]()))

    def device_ids(self) -> list[int]:
        """Native devices and VFs from 0, PFs of an SR-IOV host from `PF_FIRST_ID`."""
        ids = list(range(int(self._calls["mxSmlGetDeviceCount"]())))
        if self.has("mxSmlGetPfDeviceCount"):
            ids += range(PF_FIRST_ID, PF_FIRST_ID + int(self._calls["mxSmlGetPfDeviceCount"]()))
        return ids

    def device_info(self, device: int) -> DeviceInfo:
        info = DeviceInfo()
        self._check("mxSmlGetDeviceInfo", int(self._calls["mxSmlGetDeviceInfo"](device, ctypes.byref(info))), device)
        return info

    def usage_percent(self, device: int, ip: int = USAGE_XCORE) -> int | None:
        value = ctypes.c_int()
        return value.value if self._value("mxSmlGetDeviceIpUsage", device, ip, ctypes.byref(value)) else None

    def memory(self, device: int) -> MemoryInfo | None:
        info = MemoryInfo()
        return info if self._value("mxSmlGetMemoryInfo", device, ctypes.byref(info)) else None

    def board_power_mw(self, device: int) -> int | None:
        """The sum over the board's power inputs."""
        ways = (BoardWayElectricInfo * MAX_BOARD_WAYS)()
        size = ctypes.c_uint(MAX_BOARD_WAYS)
        if not self._value("mxSmlGetBoardPowerInfo", device, ctypes.byref(size), ways):
            return None
        return sum(int(ways[i].power) for i in range(min(size.value, MAX_BOARD_WAYS)))

    def power_limit_mw(self, device: int) -> int | None:
        if not self.has("mxSmlGetBoardPowerLimit"):
            return None
        value = ctypes.c_uint()
        return value.value if self._value("mxSmlGetBoardPowerLimit", device, ctypes.byref(value)) else None

    def temperature_centi(self, device: int, sensor: int = TEMPERATURE_HOTSPOT) -> int | None:
        value = ctypes.c_int()
        return value.value if self._value("mxSmlGetTemperatureInfo", device, sensor, ctypes.byref(value)) else None

    def state(self, device: int) -> int | None:
        """``mxSmlGetDeviceState``: 0 unavailable (mx-exporter's ``mx_gpu_state``), None when not offered."""
        if not self.has("mxSmlGetDeviceState"):
            return None
        value = ctypes.c_int()
        return value.value if self._value("mxSmlGetDeviceState", device, ctypes.byref(value)) else None

    def device_version(self, device: int, unit: int) -> str | None:
        text = ctypes.create_string_buffer(_TEXT)
        size = ctypes.c_uint(_TEXT)
        if not self._value("mxSmlGetDeviceVersion", device, unit, text, ctypes.byref(size)):
            return None
        return text.value.decode(errors="replace") or None

    def maca_version(self) -> str | None:
        text = ctypes.create_string_buffer(_TEXT)
        size = ctypes.c_uint(_TEXT)
        code = int(self._calls["mxSmlGetMacaVersion"](text, ctypes.byref(size)))
        if code == NOT_SUPPORTED:
            return None
        self._check("mxSmlGetMacaVersion", code)
        return text.value.decode(errors="replace") or None


def open_library(path: str) -> Library:
    """Load and initialise; `HardwareError` (naming the call and code) when it cannot."""
    library = Library(path)
    library.init()
    return library


@attrs.frozen
class _Device:
    id: int
    address: PciAddress
    listed: gpus.Listed


class MxSmlMonitor:
    """`GpuTelemetry` from libmxsml, joined with the sysfs inventory as `gpus.MxSmiMonitor.telemetry` is."""

    def __init__(
        self, library: Library, devices: pci.SysfsDeviceInventory, native_driver: str = inventory.METAX_MODULE
    ) -> None:
        self.library = library
        self.devices = devices
        self.native_driver = native_driver

    def is_native(self, function: PciFunction) -> bool:
        return function.driver is not None and function.driver.lower() == self.native_driver.lower()

    def telemetry(self) -> telemetry_model.Telemetry:
        functions = self.devices.functions()
        read: list[_Device] = []
        if any(self.is_native(f) for f in functions):
            read = [d for d in (self._device(i) for i in self.library.device_ids()) if d is not None]
        first = min(read, key=lambda d: d.address) if read else None
        driver = bios = maca = None
        if first is not None:
            driver = self._optional(lambda: self.library.device_version(first.id, VERSION_DRIVER))
            bios = self._optional(lambda: self.library.device_version(first.id, VERSION_BIOS))
            maca = self._optional(self.library.maca_version)
        return gpus.join_telemetry(
            self.devices,
            self.is_native,
            functions,
            {d.address: d.listed for d in read},
            SOURCE,
            versions=(driver, maca, bios),
        )

    @staticmethod
    def _optional(read: Callable[[], str | None]) -> str | None:
        try:
            return read()
        except errors.HardwareError as exc:
            log.debug("%s", exc)
            return None

    def _device(self, device: int) -> _Device | None:
        """One device's reading; None when it cannot even say which function it is (then sysfs judges it
        as not listed). Any other failing call leaves it listed without telemetry, the call as the reason."""
        lib = self.library
        try:
            info = lib.device_info(device)
            address = parse_bdf(info.bdfId.decode(errors="replace"))
        except errors.HardwareError as exc:
            log.warning("%s", exc)
            return None
        try:
            memory = lib.memory(device)
            power = lib.board_power_mw(device)
            limit = lib.power_limit_mw(device)
            temperature = lib.temperature_centi(device)
            metrics = GpuMetrics(
                address=address,
                index=device,
                name=info.deviceName.decode(errors="replace").strip(),
                utilization_percent=_float(lib.usage_percent(device)),
                temperature_celsius=temperature / 100 if temperature is not None else None,
                power_milliwatts=_float(power),
                power_cap_milliwatts=_float(limit),
                memory_used_bytes=_bytes(memory.vramUse) if memory is not None else None,
                memory_total_bytes=_bytes(memory.vramTotal) if memory is not None else None,
                xtt_used_bytes=_bytes(memory.xttUse) if memory is not None else None,
                xtt_total_bytes=_bytes(memory.xttTotal) if memory is not None else None,
                uuid=info.uuid.decode(errors="replace").strip(),
            )
            state = lib.state(device)
        except errors.HardwareError as exc:
            return _Device(device, address, gpus.Listed(None, Fault(FaultKind.NOT_ANSWERING, str(exc))))
        problem = Fault(FaultKind.STATE, f"{SOURCE} reports the device unavailable (state 0)") if state == 0 else None
        return _Device(device, address, gpus.Listed(metrics, problem))


def _bytes(kib: int) -> int | None:
    """KiB as bytes; a negative amount (what a library without that memory type may report) as none."""
    return int(kib) * 1024 if kib >= 0 else None


def _float(value: int | None) -> float | None:
    return float(value) if value is not None else None
