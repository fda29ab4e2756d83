"""Which devices a node publishes for DRA, and the ResourceSlices (``resource.k8s.io/v1``) that carry them.

The devices are gpu-device's (`metax_core.node.devices.plan_devices` in native mode, so one owner decides
which functions are usable): a GPU, or its VFs when it has them (type ``vf``), and vfio-bound GPUs (type
``vfio``, selected by their own DeviceClass). A device whose GPU is not fine (`metax_core.health.verdict`) stays
published with the device taint `TAINT_KEY` (value: its worst fault kind, effect ``NoSchedule``, `taint_of`): the
scheduler allocates it to no new claim, pods that hold it keep it (the health stream tells their status,
`metax_core.dra.health`), and the taint goes when the verdict clears, without a restart. Never ``NoExecute``:
Kubernetes' device taint eviction deletes pods without the Eviction API (no PodDisruptionBudget, no bound),
which only the operator's remediation may decide (docs/dra.md "Health"). Where the API server does not serve
device taints (the feature off: it drops the field, `taints_kept`), such a device is withdrawn instead.

Each device carries what a user selects on (R-DRA): product, uuid, the standard PCI bus id and PCIe root
(``resource.kubernetes.io/pciBusID``, ``resource.kubernetes.io/pcieRoot``: `matchAttribute` on it keeps a
claim's GPUs under one root complex), NUMA node, driver version and MetaXLink group, and its memory as
capacity. A node's devices form one pool named after the node, split into slices of at most
`MAX_DEVICES_PER_SLICE` (`MAX_TAINTED_DEVICES_PER_SLICE` while a device is tainted); `plan_slices` compares
with what is published (fields the server fills, a taint's ``timeAdded``, aside) and returns nothing to write
when nothing changed (quiet in steady state), else every slice of the pool with the pool's generation bumped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import versions
from metax_core.dra import DRIVER, classes
from metax_core.health import faults, verdict
from metax_core.inventory import DriverVersion, FunctionKind, GpuLink, GpuMetrics, PciAddress, PciFunction
from metax_core.node import devices as plugin_devices
from metax_core.node import labels
from metax_core.wire import meta

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
MAX_DEVICES_PER_SLICE = 128
"""The API server's limit on devices in one ResourceSlice."""
MAX_TAINTED_DEVICES_PER_SLICE = 64
"""Its limit when any device of the slice has taints."""
TAINT_KEY = meta.PREFIX + "gpu-health"
"""The device taint on a device whose GPU is not fine; its value is the worst fault kind (`FaultKind` value)."""
TAINT_EFFECT = "NoSchedule"
"""For degraded and unusable alike: no new claim, running pods untouched (never NoExecute, see above)."""
SERVER_FILLED_TAINT_FIELDS = frozenset({"timeAdded"})
"""A taint's fields the API server fills when the writer leaves them out: not ours to compare."""

ATTRIBUTE_DOMAIN, TYPE_ATTRIBUTE = classes.ATTRIBUTE_DOMAIN, classes.TYPE_ATTRIBUTE
TYPE_GPU, TYPE_VF, TYPE_VFIO = classes.TYPE_GPU, classes.TYPE_VF, classes.TYPE_VFIO
"""The ``type`` attribute the DeviceClasses select on (`metax_core.dra.classes` owns them)."""
PRODUCT_ATTRIBUTE = "product"
UUID_ATTRIBUTE = "uuid"
NUMA_ATTRIBUTE = "numaNode"
DRIVER_VERSION_ATTRIBUTE = "driverVersion"
LINK_GROUP_ATTRIBUTE = "metaxlinkGroup"
"""MetaXLink zone (`labels.link_zones`): GPUs joined by MetaXLink share a number ≥ 1; 0 means none."""
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
MEMORY_CAPACITY = "memory"

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)\Z")


@attrs.frozen
class NodeFacts:
    """What the dra-driver gathers on its node to decide the published devices."""

    node_name: str
    functions: tuple[PciFunction, ...] = ()
    iommu_enabled: bool = False
    metrics: tuple[GpuMetrics, ...] = ()
    links: tuple[GpuLink, ...] = ()
    driver_version: DriverVersion | None = None
    uuids: Mapping[PciAddress, str] = attrs.field(factory=dict)
    may_publish: bool = True
    """False while a required component is not ready (R-READY): nothing is published."""
    held: frozenset[PciAddress] = frozenset()
    """GPUs device-plugin pods hold (`devices.held_gpus`): neither they nor their VFs are published."""
    verdicts: Mapping[PciAddress, verdict.Verdict] = attrs.field(factory=dict)
    """Each function's verdict (`verdict.verdicts`: a VF's has its PF's faults); absent means fine."""
    taints_served: bool = True
    """False once the API server was seen dropping our taints (`taints_kept`): devices not fine are withdrawn."""


@attrs.frozen
class DeviceTaint:
    """One taint of a published device (the API's DeviceTaint, without the server's ``timeAdded``)."""

    key: str
    value: str
    effect: str = TAINT_EFFECT

    def body(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


def _worst_kind(kind: faults.FaultKind) -> tuple[int, int]:
    return (-kind.severity, list(faults.FaultKind).index(kind))


def taint_of(v: verdict.Verdict | None) -> DeviceTaint | None:
    """The taint for a GPU with verdict ``v``: None when fine; else `TAINT_KEY` = its worst fault kind (the
    most severe; among equals the first `FaultKind` declares, the nearest to the cause: FellOffBus before
    NotAnswering), effect `TAINT_EFFECT`, for degraded and unusable alike."""
    if v is None or v.fine:
        return None
    worst = min((f.kind for f in v.faults), key=_worst_kind)
    return DeviceTaint(TAINT_KEY, worst.value)


@attrs.frozen
class PublishedDevice:
    """One device of the node's pool: its name in the slice, the function behind it, what it says."""

    name: str
    address: PciAddress
    type: str
    attributes: Mapping[str, Mapping[str, Any]]
    """Qualified name → ``{"string"|"int"|"bool"|"version": value}`` (the API's DeviceAttribute)."""
    capacity: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    """Name → ``{"value": quantity}``."""
    taints: tuple[DeviceTaint, ...] = ()

    def body(self) -> dict[str, Any]:
        """The device as the ResourceSlice lists it."""
        out: dict[str, Any] = {"name": self.name, "attributes": {k: dict(v) for k, v in self.attributes.items()}}
        if self.capacity:
            out["capacity"] = {k: dict(v) for k, v in self.capacity.items()}
        if self.taints:
            out["taints"] = [t.body() for t in self.taints]
        return out


def device_name(address: PciAddress) -> str:
    """The device's name in the pool, a DNS label: ``0000:09:00.0`` → ``gpu-0000-09-00-0``."""
    return "gpu-" + address.replace(":", "-").replace(".", "-")


def pcie_root(function: PciFunction) -> str:
    """The PCIe root complex, in the form Kubernetes standardised (``pci<domain>:<bus>``): the bus of the
    topmost bridge above the device (or of the device itself when sysfs shows none)."""
    top = function.pcie_path[0] if function.pcie_path else function.address
    domain, bus = top.split(":")[:2]
    return f"pci{domain}:{bus}"


def semver(version: DriverVersion | None) -> str | None:
    """The driver version as semantic version (what a ``version`` attribute must be), None when it is not
    one (a fourth number or a suffix keeps only the first three numbers)."""
    if version is None:
        return None
    parsed = versions.try_parse(str(version))
    if parsed is None or len(parsed.numbers) < 3:
        return None
    text = ".".join(str(n) for n in parsed.numbers[:3])
    return text if _SEMVER.match(text) else None


def _memory(metrics: Sequence[GpuMetrics], address: PciAddress) -> int | None:
    for m in metrics:
        if m.address == address and m.memory_total_bytes:
            return m.memory_total_bytes
    return None


def _reported_name(metrics: Sequence[GpuMetrics], address: PciAddress) -> str | None:
    return next((m.name for m in metrics if m.address == address and m.name.strip()), None)


def published_devices(facts: NodeFacts) -> tuple[PublishedDevice, ...]:
    """The node's devices for DRA, in PCI address order: one not fine tainted (`taint_of`), or left out when
    the server does not serve taints; held ones left out; none while publishing is not allowed."""
    if not facts.may_publish:
        return ()
    plan = plugin_devices.plan_devices(
        facts.functions,
        settings=plugin_devices.NodeSettings(),
        shares=1,
        health={},
        iommu_enabled=facts.iommu_enabled,
    )
    taints = {f.address: taint_of(facts.verdicts.get(f.address)) for f in facts.functions}
    chosen = [
        (d.function, TYPE_VFIO if resource is plugin_devices.Resource.VFIO_GPU else None)
        for resource in (plugin_devices.Resource.GPU, plugin_devices.Resource.VFIO_GPU)
        for d in plan.devices.get(resource, ())
        if d.function.address not in facts.held
        and d.function.physfn not in facts.held
        and (facts.taints_served or taints[d.function.address] is None)
    ]
    zones = labels.link_zones([f.address for f, _ in chosen], facts.links)
    version = semver(facts.driver_version)
    out = []
    for function, forced in sorted(chosen, key=lambda c: c[0].address):
        kind = forced or (TYPE_VF if function.kind is FunctionKind.VF else TYPE_GPU)
        parent = function.physfn if function.kind is FunctionKind.VF and function.physfn else function.address
        product = labels.product_of(function, _reported_name(facts.metrics, parent))
        own = f"{ATTRIBUTE_DOMAIN}/"
        attributes: dict[str, dict[str, Any]] = {
            own + TYPE_ATTRIBUTE: {"string": kind},
            own + PRODUCT_ATTRIBUTE: {"string": product},
            own + UUID_ATTRIBUTE: {
                "string": labels.device_uuid(facts.node_name, function.address, facts.uuids.get(function.address))
            },
            own + LINK_GROUP_ATTRIBUTE: {"int": zones.get(function.address, 0)},
            PCI_BUS_ID_ATTRIBUTE: {"string": function.address},
            PCIE_ROOT_ATTRIBUTE: {"string": pcie_root(function)},
        }
        if function.numa_node is not None and function.numa_node >= 0:
            attributes[own + NUMA_ATTRIBUTE] = {"int": function.numa_node}
        if version is not None and kind != TYPE_VFIO:
            attributes[own + DRIVER_VERSION_ATTRIBUTE] = {"version": version}
        memory = _memory(facts.metrics, function.address)
        capacity = {MEMORY_CAPACITY: {"value": str(memory)}} if memory and kind != TYPE_VFIO else {}
        taint = taints[function.address]
        out.append(
            PublishedDevice(
                device_name(function.address),
                function.address,
                kind,
                attributes,
                capacity,
                (taint,) if taint is not None else (),
            )
        )
    return tuple(out)


# --- slices -----------------------------------------------------------------------------------------------


def slice_name(node_name: str, index: int) -> str:
    """Slices are named by node, driver and index: stable, so a restarted driver finds and updates its own."""
    return f"{node_name}-{DRIVER}-{index}"


@attrs.frozen
class NodeRef:
    """The Node object the slices belong to (their owner: the API server collects them with the node)."""

    name: str
    uid: str


@attrs.frozen
class SlicePlan:
    """What to write so that the published pool is what the node has: slices to apply, names to delete."""

    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()
    generation: int = 0

    @property
    def quiet(self) -> bool:
        return not self.apply and not self.delete


def _chunks(items: Sequence[PublishedDevice]) -> list[Sequence[PublishedDevice]]:
    size = MAX_TAINTED_DEVICES_PER_SLICE if any(d.taints for d in items) else MAX_DEVICES_PER_SLICE
    return [items[i : i + size] for i in range(0, len(items), size)]


def _ours_only(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """A device as we wrote it: its taints without the fields the server fills."""
    if not device.get("taints"):
        return {k: v for k, v in device.items() if k != "taints"}
    taints = [{k: v for k, v in t.items() if k not in SERVER_FILLED_TAINT_FIELDS} for t in device["taints"]]
    return {**device, "taints": taints}


def _content(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What decides whether a published slice is still right (everything but the generation and what the
    server fills)."""
    pool = spec.get("pool") or {}
    return (
        spec.get("driver"),
        spec.get("nodeName"),
        pool.get("name"),
        pool.get("resourceSliceCount"),
        [_ours_only(d) for d in spec.get("devices") or ()],
    )


def _taint_key(device: str, taint: Mapping[str, Any]) -> tuple[str, Any, Any, Any]:
    return (device, taint.get("key"), taint.get("value"), taint.get("effect"))


def _times_added(slices: Sequence[Mapping[str, Any]]) -> dict[tuple[str, Any, Any, Any], Any]:
    """When each published taint was added (the server's ``timeAdded``), by device and taint."""
    return {
        _taint_key(str(d.get("name")), t): t["timeAdded"]
        for s in slices
        for d in (s.get("spec") or {}).get("devices") or ()
        for t in d.get("taints") or ()
        if t.get("timeAdded")
    }


def taints_kept(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """Whether the API server kept every taint of the slice ``sent`` in what it ``stored`` (returned): a server
    with device taints off drops the field without an error."""
    kept = {
        _taint_key(str(d.get("name")), t)
        for d in (stored.get("spec") or {}).get("devices") or ()
        for t in d.get("taints") or ()
    }
    return all(
        _taint_key(str(d.get("name")), t) in kept
        for d in (sent.get("spec") or {}).get("devices") or ()
        for t in d.get("taints") or ()
    )


def _ours(existing: Sequence[Mapping[str, Any]], node_name: str) -> list[Mapping[str, Any]]:
    return [
        s
        for s in existing
        if (s.get("spec") or {}).get("driver") == DRIVER and (s.get("spec") or {}).get("nodeName") == node_name
    ]


def plan_slices(node: NodeRef, wanted: Sequence[PublishedDevice], existing: Sequence[Mapping[str, Any]]) -> SlicePlan:
    """Slices to write for ``wanted`` given the ``existing`` ResourceSlices (any driver, any node: the
    others are ignored). Unchanged → an empty plan; changed → every slice with the generation bumped past
    the highest published; no devices → every slice deleted (the pool is gone)."""
    mine = sorted(_ours(existing, node.name), key=lambda s: str((s.get("metadata") or {}).get("name", "")))
    published_gen = max((int(((s.get("spec") or {}).get("pool") or {}).get("generation", 0)) for s in mine), default=0)
    chunks = _chunks(list(wanted))
    specs: list[dict[str, Any]] = [
        {
            "driver": DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": published_gen, "resourceSliceCount": len(chunks)},
            "devices": [d.body() for d in chunk],
        }
        for chunk in chunks
    ]
    added = _times_added(mine)
    for spec in specs:  # a rewrite keeps a standing taint's time (the server would stamp it anew)
        for device in spec["devices"]:
            for taint in device.get("taints", ()):
                if (when := added.get(_taint_key(device["name"], taint))) is not None:
                    taint["timeAdded"] = when
    names = [slice_name(node.name, i) for i in range(len(specs))]
    by_name = {str((s.get("metadata") or {}).get("name", "")): s for s in mine}
    unchanged = set(by_name) == set(names) and all(
        _content(by_name[n].get("spec") or {}) == _content(spec) for n, spec in zip(names, specs, strict=True)
    )
    generations = {int(((s.get("spec") or {}).get("pool") or {}).get("generation", 0)) for s in mine}
    if unchanged and len(generations) <= 1:
        return SlicePlan(generation=published_gen)
    generation = published_gen + 1
    bodies = []
    for name, spec in zip(names, specs, strict=True):
        spec["pool"]["generation"] = generation
        bodies.append(
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {
                    "name": name,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
                },
                "spec": spec,
            }
        )
    stale = tuple(sorted(set(by_name) - set(names)))
    return SlicePlan(apply=tuple(bodies), delete=stale, generation=generation)


def published_in(slices: Sequence[Mapping[str, Any]], node_name: str) -> dict[str, Mapping[str, Any]]:
    """The devices of our pool on ``node_name`` by name, from the newest generation's slices (the reader's
    side of `plan_slices`, for the driver's own prepare checks and for tests)."""
    mine = _ours(slices, node_name)
    newest = max((int(((s.get("spec") or {}).get("pool") or {}).get("generation", 0)) for s in mine), default=0)
    out: dict[str, Mapping[str, Any]] = {}
    for s in mine:
        spec = s.get("spec") or {}
        if int((spec.get("pool") or {}).get("generation", 0)) == newest:
            for device in spec.get("devices") or ():
                out[str(device.get("name"))] = device
    return out
