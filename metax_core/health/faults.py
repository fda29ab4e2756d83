"""The faults a GPU reading can show, how bad each is, and how a reading becomes faults (R-HEALTH).

Why one list: gpu-device, the DRA driver, the exporter, the operator's node condition and doctor all name a
GPU's trouble, and an administrator filters alerts and Events on those names. Each kind has one severity:

- **unusable**: the GPU cannot run work (gone from the bus, no driver, not answering its tool, its own state
  says it failed). The device plugin marks it Unhealthy, the DRA driver taints it, remediation (when on) may
  evict the pods holding it.
- **degraded**: it works, but should take no new work until it recovers (too hot, drawing more than its
  limit, its PCIe link trained below its maximum, or its health unknown for too long). Unhealthy in the
  device plugin (the kubelet's only other state), NoSchedule on DRA, never remediated.

A reading that failed because the tool failed (mx-smi timed out, libmxsml not loaded) shows no fault: it is
unknown (`metax_core.health.verdict`), and becomes the degraded `HEALTH_UNKNOWN` only after a grace period.

What is not read, and why (docs/health.md): ECC and RAS counters (mx-smi's summary does not print them and
libmxsml's calls for them are not in the binding: no public header documents them), PCIe AER counters.
"""

from __future__ import annotations

import re

import attrs

from metax_core.inventory import SEVERITY, Fault, FaultKind, Severity, worst

__all__ = ["SEVERITY", "Fault", "FaultKind", "Limits", "PcieLink", "Severity", "link_fault", "reading_faults", "worst"]


@attrs.frozen
class Limits:
    """Where a reading's numbers become faults (docs/health.md)."""

    temperature_celsius: float = 95.0
    """Hotspot temperature at or above which a GPU is degraded (Thermal)."""
    power_tolerance: float = 0.05
    """How far above its power limit a board may read before it is degraded (PowerOverLimit): a board at its
    limit is working as designed (it throttles); one well above it is not."""


LIMITS = Limits()

_BAD_STATE = re.compile(r"unavail|error|fail|lost|fault|abnormal|hang|reset|offline|invalid|n/a", re.IGNORECASE)
"""Words in the vendor tool's GPU state that mean "do not schedule here" (docs/hardware.md lists the assumption)."""


def state_fault(state: str, source: str = "mx-smi") -> Fault | None:
    """The fault the vendor tool's state word shows (mx-smi's GPU-State, libmxsml's device state), if any."""
    if not _BAD_STATE.search(state):
        return None
    return Fault(FaultKind.STATE, f"{source} reports GPU-State {state}")


def reading_faults(
    temperature_celsius: float | None,
    power_milliwatts: float | None,
    power_limit_milliwatts: float | None,
    limits: Limits = LIMITS,
) -> tuple[Fault, ...]:
    """The degraded faults a telemetry reading shows (a value the tool did not report shows none)."""
    out: list[Fault] = []
    if temperature_celsius is not None and temperature_celsius >= limits.temperature_celsius:
        out.append(
            Fault(
                FaultKind.THERMAL,
                f"hotspot {temperature_celsius:g} °C, limit {limits.temperature_celsius:g} °C",
            )
        )
    if (
        power_milliwatts is not None
        and power_limit_milliwatts
        and power_milliwatts > power_limit_milliwatts * (1 + limits.power_tolerance)
    ):
        out.append(
            Fault(
                FaultKind.POWER,
                f"board power {power_milliwatts / 1000:g} W, limit {power_limit_milliwatts / 1000:g} W",
            )
        )
    return tuple(out)


@attrs.frozen
class PcieLink:
    """A function's PCIe link as the kernel shows it (``current_link_speed``/``width``, ``max_link_*``)."""

    speed: str | None = None
    """E.g. ``16.0 GT/s PCIe`` (the kernel's words); None when the file is absent."""
    width: int | None = None
    max_speed: str | None = None
    max_width: int | None = None


_GTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


def _gts(text: str | None) -> float | None:
    match = _GTS.match(text or "")
    return float(match.group(1)) if match else None


def link_fault(link: PcieLink) -> Fault | None:
    """LinkDegraded when the link trained slower or narrower than its maximum (values the kernel does not
    give, or gives as ``Unknown``, show no fault)."""
    problems: list[str] = []
    speed, top = _gts(link.speed), _gts(link.max_speed)
    if speed is not None and top is not None and speed < top:
        problems.append(f"speed {speed:g} GT/s of {top:g} GT/s")
    if link.width is not None and link.max_width is not None and 0 < link.width < link.max_width:
        problems.append(f"width x{link.width} of x{link.max_width}")
    if not problems:
        return None
    return Fault(FaultKind.LINK, "PCIe link " + ", ".join(problems))
