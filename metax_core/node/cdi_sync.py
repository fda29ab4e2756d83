"""Devices and their CDI entries in step: what the CDI spec holds, and what may be advertised (issue 20).

Why this module exists: a container runtime resolves the CDI names that Allocate returned only when the
container is created, which can be long after the kubelet allocated the device (sandbox set-up, init
containers, a container restarted by its pod days later). Two rules keep every name the kubelet can hold
resolvable, and gpu-device applies them every loop:

1. *Spec before list.* A device of ``gpu``/``sgpu`` is advertised only once its CDI entry is in the spec
   on disk (`advertisable`): the spec is written first, and what could not be written is withheld.
2. *Keep while held.* An entry whose device is no longer advertised (a PF that got VFs, a GPU that left
   the bus, a mode switch) stays in the spec while it may still be needed (`decide_entries`):
   while a pod holds the device according to the kubelet's PodResources API; while that cannot be read
   (nobody can tell that it is safe); and for ``grace`` seconds after the device was last advertised or
   allocated, which covers a kubelet that allocates from the list before our update reached it and an
   allocation the PodResources API does not show yet.

Pure: the caller passes the time (monotonic seconds) and the holders it read.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from metax_core.node import cdi, devices


class Kept(enum.Enum):
    """Why an entry of a device that is not advertised any more stays in the spec."""

    HELD = "held by a pod"
    HOLDERS_UNKNOWN = "the kubelet's PodResources cannot be read"
    GRACE = "withdrawn recently"


@attrs.frozen
class Entry:
    """One CDI entry gpu-device keeps, and when its device was last advertised or allocated."""

    device: cdi.CdiDevice
    last_offered: float


@attrs.frozen
class SpecDecision:
    """The entries the spec must hold now (the next ``previous``), why the withdrawn ones stay, what goes."""

    entries: Mapping[str, Entry]
    kept: Mapping[str, Kept] = attrs.field(factory=dict)
    dropped: tuple[str, ...] = ()

    def devices(self) -> tuple[cdi.CdiDevice, ...]:
        """The entries to write, sorted by name (a stable file)."""
        return tuple(self.entries[n].device for n in sorted(self.entries))


def decide_entries(
    advertised: Sequence[cdi.CdiDevice],
    previous: Mapping[str, Entry],
    *,
    held: Collection[str] | None,
    now: float,
    grace: float,
    allocated: Mapping[str, float] | None = None,
) -> SpecDecision:
    """Which CDI entries the spec holds: every advertised device (with its current device nodes), and every
    previous entry that a pod holds (``held``: CDI names; None when the holders cannot be read) or that was
    advertised or allocated (``allocated``: name → time of the last Allocate answer) less than ``grace``
    seconds before ``now``."""
    allocated = allocated or {}
    entries: dict[str, Entry] = {}
    for device in advertised:
        entries[device.name] = Entry(device, now)
    kept: dict[str, Kept] = {}
    dropped: list[str] = []
    for name in sorted(set(previous) - set(entries)):
        old = previous[name]
        last = max(old.last_offered, allocated.get(name, old.last_offered))
        entry = Entry(old.device, last)
        if held is None:
            kept[name] = Kept.HOLDERS_UNKNOWN
        elif name in held:
            kept[name] = Kept.HELD
        elif now - last < grace:
            kept[name] = Kept.GRACE
        else:
            dropped.append(name)
            continue
        entries[name] = entry
    return SpecDecision(entries=entries, kept=kept, dropped=tuple(dropped))


def seed(spec: Mapping[str, object] | None, now: float) -> dict[str, Entry]:
    """The entries of a spec found on disk at start (a previous run's), as kept entries offered ``now``:
    a restarted gpu-device keeps what the pods of the previous run may still need. Whatever a valid spec
    could not hold (a bad name, a relative device path) is left out."""
    if not spec:
        return {}
    found: dict[str, Entry] = {}
    items = spec.get("devices")
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        if cdi.name_errors(item["name"], "name"):
            continue  # not ours to keep: it would make every later spec invalid
        edits = item.get("containerEdits")
        nodes = edits.get("deviceNodes") if isinstance(edits, Mapping) else None
        paths = (
            tuple(
                str(n["path"])
                for n in nodes
                if isinstance(n, Mapping) and isinstance(n.get("path"), str) and n["path"].startswith("/")
            )
            if isinstance(nodes, list)
            else ()
        )
        found[item["name"]] = Entry(cdi.CdiDevice(item["name"], paths), now)
    return found


def names_in(spec: Mapping[str, object] | None) -> frozenset[str]:
    """The device names a spec document defines (none for None)."""
    return frozenset(seed(spec, 0.0))


def held_names(held: Mapping[str, Iterable[str]]) -> frozenset[str]:
    """CDI names of the devices pods hold, from the kubelet's view (resource name → device IDs)."""
    names: set[str] = set()
    for resource_name, ids in held.items():
        try:
            resource = devices.Resource(resource_name)
        except ValueError:
            continue  # another plugin's resource
        for device_id in ids:
            name = devices.cdi_name(resource, device_id)
            if name is not None:
                names.add(name)
    return frozenset(names)


@attrs.frozen
class Offer:
    """What may be advertised: the plan without the devices whose CDI entry is not on disk."""

    plan: devices.Plan
    withheld: tuple[str, ...] = ()


def advertisable(plan: devices.Plan, on_disk: Collection[str]) -> Offer:
    """Rule 1: a ``gpu``/``sgpu`` device is offered only when its CDI entry is in the spec on disk
    (``on_disk``: CDI device names); ``vfio-gpu`` needs no CDI entry."""
    kept: dict[devices.Resource, tuple[devices.Device, ...]] = {}
    withheld: list[str] = []
    for resource, listed in plan.devices.items():
        ok = []
        for device in listed:
            name = devices.cdi_name(resource, device.id)
            if name is None or name in on_disk:
                ok.append(device)
            else:
                withheld.append(device.id)
        kept[resource] = tuple(ok)
    return Offer(devices.Plan(devices=kept, problems=plan.problems), tuple(withheld))
