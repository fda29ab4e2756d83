"""The health the DRA driver streams to the kubelet (``DRAResourceHealth``), from gpu-device's checks.

Every device the node has published since the driver started is reported, so a device that is no longer
published is still answered for: unhealthy when its GPU reports so (`metax_core.node.devices.effective_health`,
the same checks and thresholds as gpu-device) or when it is gone from the PCI bus, healthy otherwise. The
kubelet shows it in the status of pods that hold the device (``allocatedResourcesStatus``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from metax_core.dra import model
from metax_core.inventory import PciAddress
from metax_core.node import devices as plugin_devices

GONE = "not on the PCI bus any longer"


def reports(
    pool: str,
    known: Mapping[str, PciAddress],
    present: Collection[PciAddress],
    health: Mapping[PciAddress, plugin_devices.Health],
    now: float,
    timeout_seconds: int = 0,
) -> tuple[model.DeviceHealthReport, ...]:
    """One report per device in ``known`` (device name → its function), in name order."""
    out = []
    for name, address in sorted(known.items()):
        h = health.get(address, plugin_devices.Health(True))
        if address not in present:
            state, message = model.HealthState.UNHEALTHY, GONE
        elif not h.healthy:
            state, message = model.HealthState.UNHEALTHY, h.reason or "unhealthy"
        else:
            state, message = model.HealthState.HEALTHY, ""
        out.append(model.DeviceHealthReport(pool, name, state, message, now, timeout_seconds))
    return tuple(out)


def changed(before: tuple[model.DeviceHealthReport, ...], after: tuple[model.DeviceHealthReport, ...]) -> bool:
    """Whether the stream has news (a report's state or message differs; the times alone are no news)."""

    def key(reports: tuple[model.DeviceHealthReport, ...]) -> list[tuple[str, str, model.HealthState, str]]:
        return [(r.pool, r.device, r.state, r.message) for r in reports]

    return key(before) != key(after)
