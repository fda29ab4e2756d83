"""The health the DRA driver streams to the kubelet (``DRAResourceHealth``), from the one verdict (R-HEALTH).

Every device the node has published since the driver started is reported, so a device that is no longer
published is still answered for: unhealthy while its GPU is not fine (`metax_core.health.verdict`, the same
verdict as gpu-device's and as the device's taint, `metax_core.dra.slices.taint_of`) or when it is gone from the
PCI bus, healthy otherwise. Degraded is unhealthy too (the message names its severity and faults): the kubelet's
other state, unknown, means the plugin stopped answering, and a degraded GPU should take no new work, which is
what its NoSchedule taint says. The kubelet shows it in the status of pods that hold the device
(``allocatedResourcesStatus``).

`holders` names the pods that hold each GPU for the node's health report (`metax_core.health.report`, read by
the operator's remediation): the claims the driver prepared (its checkpoint) and the pods each claim is reserved
for (``status.reservedFor``). The driver reads those claims only while a GPU is not fine (`claims_to_read`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from metax_core.dra import model, prepare
from metax_core.health import verdict
from metax_core.inventory import PciAddress, PciFunction
from metax_core.node import devices as plugin_devices

GONE = "not on the PCI bus any longer"


def reports(
    pool: str,
    known: Mapping[str, PciAddress],
    present: Collection[PciAddress],
    verdicts: Mapping[PciAddress, verdict.Verdict],
    now: float,
    timeout_seconds: int = 0,
) -> tuple[model.DeviceHealthReport, ...]:
    """One report per device in ``known`` (device name → its function), in name order; a function without a
    verdict is fine."""
    out = []
    for name, address in sorted(known.items()):
        v = verdicts.get(address, verdict.FINE)
        if address not in present:
            state, message = model.HealthState.UNHEALTHY, GONE
        elif not v.fine:
            state, message = model.HealthState.UNHEALTHY, f"{v.severity.word}: {v.describe()}"
        else:
            state, message = model.HealthState.HEALTHY, ""
        out.append(model.DeviceHealthReport(pool, name, state, message, now, timeout_seconds))
    return tuple(out)


def changed(before: tuple[model.DeviceHealthReport, ...], after: tuple[model.DeviceHealthReport, ...]) -> bool:
    """Whether the stream has news (a report's state or message differs; the times alone are no news)."""

    def key(reports: tuple[model.DeviceHealthReport, ...]) -> list[tuple[str, str, model.HealthState, str]]:
        return [(r.pool, r.device, r.state, r.message) for r in reports]

    return key(before) != key(after)


def claims_to_read(
    checkpoint: prepare.Checkpoint,
    addresses: Mapping[str, PciAddress],
    verdicts: Mapping[PciAddress, verdict.Verdict],
) -> tuple[prepare.PreparedClaim, ...]:
    """The prepared claims holding a device (name → its function in ``addresses``) whose GPU is not fine, in
    uid order: none on a healthy node, so the steady path reads no claim."""
    sick = {a for a, v in verdicts.items() if not v.fine}
    return tuple(
        entry
        for _, entry in sorted(checkpoint.claims.items())
        if any(addresses.get(d.device) in sick for d in entry.devices)
    )


def _reserved_pods(entry: prepare.PreparedClaim, claim: Mapping[str, Any] | None) -> list[str]:
    if claim is None or (claim.get("metadata") or {}).get("uid") != entry.claim.uid:
        return []  # gone, or another claim of the same name: not the one prepared here
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return [
        f"{entry.claim.namespace}/{r['name']}"
        for r in reserved
        if r.get("resource") == "pods" and not r.get("apiGroup") and r.get("name")
    ]


def holders(
    claims: Iterable[tuple[prepare.PreparedClaim, Mapping[str, Any] | None]],
    addresses: Mapping[str, PciAddress],
    functions: Sequence[PciFunction],
) -> dict[PciAddress, tuple[str, ...]]:
    """Function → ``namespace/name`` of the pods holding its GPU, from each prepared claim and the claim as the
    API server has it (None or another uid: not found, no holders known). A pod holding a VF holds its GPU: the
    PF and every VF of it list the pod (`plugin_devices.holders_by_function`), as the report's remediation
    expects."""
    by_device: dict[str, list[str]] = {}
    for entry, claim in claims:
        pods = _reserved_pods(entry, claim)
        for d in entry.devices:
            address = addresses.get(d.device)
            if address is not None and pods:
                by_device.setdefault(address, []).extend(pods)
    return plugin_devices.holders_by_function(by_device, functions)
