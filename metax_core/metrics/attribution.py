"""Who holds which GPU: the kubelet's PodResources answer turned into holders per PCI function.

Why pure: the exporter labels every GPU's series with the namespace, pod and container holding it; which
function a device ID names is the device plugin's format (`metax_core.node.devices.device_address`), and a
VF, a vfio-bound GPU or an sGPU share is attributed to its function exactly as gpu-device advertised it.
Devices of other resources (another vendor's plugin) are not ours and are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from metax_core.inventory import PciAddress
from metax_core.node import devices


@attrs.frozen(order=True)
class Holder:
    namespace: str
    pod: str
    container: str


@attrs.frozen
class HeldDevices:
    """One container's devices of one resource, as the PodResources ``List`` gives them."""

    holder: Holder
    resource: str
    ids: tuple[str, ...]


@attrs.frozen(order=True)
class Holding:
    """A container holding ``count`` devices of ``resource`` on one function (sGPU: its shares; else 1)."""

    holder: Holder
    resource: str
    count: int


Holdings = Mapping[PciAddress, tuple[Holding, ...]]


def _resource(name: str) -> devices.Resource | None:
    try:
        return devices.Resource(name)
    except ValueError:
        return None


def holdings(held: Iterable[HeldDevices]) -> Holdings:
    """Every function some container holds, with its holders sorted (stable series order)."""
    counts: dict[tuple[PciAddress, Holder, str], int] = {}
    for entry in held:
        resource = _resource(entry.resource)
        if resource is None:
            continue
        for device_id in entry.ids:
            key = (devices.device_address(resource, device_id), entry.holder, entry.resource)
            counts[key] = counts.get(key, 0) + 1
    out: dict[PciAddress, list[Holding]] = {}
    for (address, holder, resource_name), count in counts.items():
        out.setdefault(address, []).append(Holding(holder, resource_name, count))
    return {address: tuple(sorted(found)) for address, found in sorted(out.items())}
