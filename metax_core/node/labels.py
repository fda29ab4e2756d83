"""Node labels and annotations published by gpu-label from a node's inventory (R-LABELS, §3.3.2), and the
one definition of every other node label key the product writes or reads (driver-manager's ``driver.*``,
the administrator's ``gpu-device.*``): writers and readers import them from here (issue 20).

Pods select GPU nodes with these labels (``metax-tech.com/gpu.product: C500``, ``gpu.vfnum: "0"`` in §3.3.2),
MetaX's own DaemonSets gate on ``gpu.installed``, and HAMi schedules sGPU from the
``metax-tech.com/node-gpu-devices`` annotation. Names follow MetaX's operator so existing node selectors,
dashboards and HAMi keep working. docs/labels.md documents every key and value.

`node_labels` and `node_annotations` always return EVERY key gpu-label owns, with None for the keys to
remove, so a stale label (a GPU gone, a driver unloaded) is cleaned by the same patch that sets the others.
They never return keys administrators own (``gpu-device.mode``, ``gpu-device.qos-policy``; gpu-device reads
those through `metax_core.node.devices.settings_from_labels`).
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from collections.abc import Mapping, Sequence

import attrs

from metax_core import versions
from metax_core.inventory import (
    FunctionKind,
    GpuHealth,
    GpuLink,
    GpuMetrics,
    LinkKind,
    ModuleState,
    PciAddress,
    PciFunction,
)
from metax_core.node import devices
from metax_core.wire import meta

PREFIX = meta.PREFIX

GPU_INSTALLED = PREFIX + "gpu.installed"
TRUE = "true"
"""The value of the yes/no labels (``gpu.installed``, ``driver.ready``), as node selectors match it."""
GPU_PRODUCT = PREFIX + "gpu.product"
GPU_FAMILY = PREFIX + "gpu.family"
GPU_COUNT = PREFIX + "gpu.count"
GPU_MEMORY = PREFIX + "gpu.memory"
GPU_VFNUM = PREFIX + "gpu.vfnum"
GPU_SRIOV = PREFIX + "gpu.sriov"
GPU_DRIVER_MAJOR = PREFIX + "gpu.driver.major"
GPU_DRIVER_MINOR = PREFIX + "gpu.driver.minor"
GPU_DRIVER_PATCH = PREFIX + "gpu.driver.patch"
GPU_MACA_VERSION = PREFIX + "gpu.maca.version"
OWNED_LABELS = (
    GPU_INSTALLED,
    GPU_PRODUCT,
    GPU_FAMILY,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_VFNUM,
    GPU_SRIOV,
    GPU_DRIVER_MAJOR,
    GPU_DRIVER_MINOR,
    GPU_DRIVER_PATCH,
)
"""Every label gpu-label writes (and removes at uninstall)."""

DRIVER_READY = PREFIX + "driver.ready"
"""Written by driver-manager: `TRUE` while the wanted driver is loaded (MetaX's operator gates on it)."""
DRIVER_VERSION = PREFIX + "driver.version"
"""Written by driver-manager: the loaded driver's version, while ready."""
FIRMWARE_FLASHING = PREFIX + "firmware.flashing"
"""Written by driver-manager: `TRUE` from just before it flashes firmware until the flash is over. While any node
carries it, the webhook refuses edits of the fields that decide what gets flashed (R-FW, `policy.FIRMWARE_FIELDS`);
it selects the nodes by this label, so the check costs one small list and only on such an edit."""
DRIVER_LABELS = (DRIVER_READY, DRIVER_VERSION, FIRMWARE_FLASHING)
"""Every label driver-manager writes (and removes at uninstall)."""
MULTI_HOST_INTERCONNECT = PREFIX + "gpu.multi-host-interconnect"
"""Set by the administrator: `TRUE` on a node whose GPUs are interconnected with other hosts' GPUs. driver-manager
then refuses to flash firmware, which seed 001 §3.2.9 does not support there (nothing on the node tells it)."""
RUNTIME_READY = PREFIX + "runtime.ready"
"""Written by container-runtime: `TRUE` while the node's container runtime is set up for MetaX GPUs (the seed's
selectors and MetaX's own manifests gate on such readiness labels; issue 41 item 4)."""
MACA_READY = PREFIX + "maca.ready"
"""Written by the maca agent: `TRUE` while every MXMACA version the spec lists is installed."""


def ready_label(key: str, ready: bool) -> dict[str, str | None]:
    """A readiness label's patch: `TRUE` while ready, removed (None) otherwise; a selector never sees "false"."""
    return {key: TRUE if ready else None}


NODE_GPU_DEVICES = PREFIX + "node-gpu-devices"
"""HAMi's sGPU device list (JSON)."""
MACA_VERSIONS = PREFIX + "maca.versions"
"""Written by the maca agent: every installed MXMACA version, newest first, comma-separated."""
OWNED_ANNOTATIONS = (NODE_GPU_DEVICES,)
"""Every annotation gpu-label writes."""
MACA_LABELS = (GPU_MACA_VERSION,)
"""Written by the maca agent (the newest installed MXMACA version), removed at its uninstall."""
MACA_ANNOTATIONS = (MACA_VERSIONS,)

GPU_DEVICE_MODE = devices.MODE_LABEL
"""Set by administrators (§3.2.10); read by gpu-device (`devices.settings_from_labels`), never written."""
GPU_DEVICE_QOS_POLICY = devices.QOS_LABEL
"""Set by administrators (Table 3.19); read by gpu-device, never written."""

MIB = 1 << 20
TOTAL_COMPUTE = 100
"""HAMi counts a GPU's compute in percent."""
MAX_LABEL_VALUE = 63
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_VENDOR_WORD = re.compile(r"^\s*metax\b[\s_-]*", re.IGNORECASE)
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "metax-tech.com")


@attrs.frozen
class GpuModel:
    product: str
    family: str


MODELS: Mapping[int, GpuModel] = {0x4000: GpuModel("C500", "xiyun")}
"""PCI device id → model. 0x4000 → C500 is an assumption from public material; other ids fall back to
the name mx-smi reports."""
_FAMILIES = {"C": "xiyun", "N": "xisi", "G": "xicai"}
"""MetaX product series by the model's letter: 曦云 Xiyun (C, training), 曦思 Xisi (N, inference),
曦彩 Xicai (G, graphics)."""


def is_valid_label_value(text: str) -> bool:
    return len(text) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.match(text))


def sanitize_label_value(text: str, *, fallback: str = "unknown") -> str:
    """A valid, non-empty label value resembling ``text``: ASCII-folded, invalid runs → ``-``, ≤ 63 chars."""
    if not is_valid_label_value(fallback):
        raise ValueError(f"fallback {fallback!r} is not a valid label value")
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    cleaned = _EDGE.sub("", _INVALID_RUN.sub("-", folded))
    cleaned = _EDGE.sub("", cleaned[:MAX_LABEL_VALUE])
    return cleaned if cleaned else fallback


@attrs.frozen
class NodeInventory:
    """What gpu-label gathers on one node through the hardware port."""

    node_name: str
    functions: tuple[PciFunction, ...] = ()
    metrics: tuple[GpuMetrics, ...] = ()
    """mx-smi's view: product name and VRAM size per function."""
    health: Mapping[PciAddress, GpuHealth] = attrs.field(factory=dict)
    module: ModuleState | None = None
    """The loaded ``metax`` module, None when not loaded."""
    links: tuple[GpuLink, ...] = ()
    uuids: Mapping[PciAddress, str] = attrs.field(factory=dict)
    """UUIDs the vendor tool reports; functions without one get `device_uuid`'s derived id."""


def gpus(functions: Sequence[PciFunction]) -> list[PciFunction]:
    """The node's GPUs for counting and naming: its PFs, or its VFs when it sees no PF (a VM)."""
    pfs = [f for f in functions if f.kind is FunctionKind.PF]
    return sorted(pfs or list(functions), key=lambda f: f.address)


def _name_of(inventory: NodeInventory, address: PciAddress) -> str | None:
    for m in inventory.metrics:
        if m.address == address and m.name.strip():
            return m.name
    return None


def product_of(function: PciFunction, reported_name: str | None) -> str:
    """The ``gpu.product`` value: from the device id table, else the reported name without "MetaX"."""
    model = MODELS.get(function.device_id)
    if model is not None:
        return model.product
    if reported_name and reported_name.strip():
        return sanitize_label_value(_VENDOR_WORD.sub("", reported_name) or reported_name)
    return f"device-{function.device_id:04x}"


def family_of(function: PciFunction, product: str) -> str | None:
    model = MODELS.get(function.device_id)
    if model is not None:
        return model.family
    return _FAMILIES.get(product[:1].upper()) if product[1:2].isdigit() else None


def _memory_mib(inventory: NodeInventory, addresses: Sequence[PciAddress]) -> int | None:
    wanted = set(addresses)
    sizes = [
        m.memory_total_bytes // MIB
        for m in inventory.metrics
        if m.address in wanted and m.memory_total_bytes is not None and m.memory_total_bytes > 0
    ]
    return min(sizes) if sizes else None


def _maca_sorted(names: Sequence[str]) -> list[versions.Version]:
    parsed = []
    for name in names:
        bare = name.strip()
        bare = bare[len(versions.MACA_PREFIX) :] if bare.startswith(versions.MACA_PREFIX) else bare
        version = versions.try_parse(bare)
        if version is not None:
            parsed.append(version)
    return sorted(set(parsed), reverse=True)


def node_labels(inventory: NodeInventory) -> dict[str, str | None]:
    """Every label in OWNED_LABELS: its value, or None to remove it. A node without MetaX GPUs gets all None."""
    labels: dict[str, str | None] = dict.fromkeys(OWNED_LABELS)
    devices = gpus(inventory.functions)
    if not devices:
        return labels
    first = devices[0]
    product = product_of(first, _name_of(inventory, first.address))
    labels[GPU_INSTALLED] = TRUE
    labels[GPU_PRODUCT] = product
    family = family_of(first, product)
    labels[GPU_FAMILY] = family
    labels[GPU_COUNT] = str(len(devices))
    memory = _memory_mib(inventory, [d.address for d in devices])
    labels[GPU_MEMORY] = None if memory is None else str(memory)
    if first.kind is FunctionKind.PF:
        counts = {d.sriov_numvfs for d in devices}
        labels[GPU_VFNUM] = str(counts.pop()) if len(counts) == 1 else None
        labels[GPU_SRIOV] = "true" if any(d.sriov_totalvfs > 0 for d in devices) else "false"
    driver = versions.try_parse(inventory.module.version) if inventory.module and inventory.module.version else None
    if driver is not None:
        parts = [GPU_DRIVER_MAJOR, GPU_DRIVER_MINOR, GPU_DRIVER_PATCH]
        for key, number in zip(parts, driver.numbers, strict=False):
            labels[key] = str(number)
    return labels


def discovery_labels(functions: Sequence[PciFunction]) -> dict[str, str | None]:
    """gpu-discovery's labels (issue 38 item 3): ``gpu.installed`` where the node has MetaX GPUs (the GPU components
    run only there); on a node without any, every label the GPU components own removed (the node's GPUs went, and
    gpu-label's pod with its label)."""
    if gpus(functions):
        return {GPU_INSTALLED: TRUE}
    return dict.fromkeys(OWNED_LABELS)


def maca_metadata(installed: Sequence[str], ready: bool = False) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The maca agent's labels (newest version; `MACA_READY` while ``ready``) and annotation (all, newest first);
    None removes them."""
    maca = _maca_sorted(installed)
    label = sanitize_label_value(str(maca[0])) if maca else None
    versions = {MACA_VERSIONS: ",".join(str(v) for v in maca) if maca else None}
    return {GPU_MACA_VERSION: label, **ready_label(MACA_READY, ready)}, versions


def device_uuid(node_name: str, address: PciAddress, reported: str | None = None) -> str:
    """The id a GPU has in HAMi's annotation and in gpu-device's sGPU devices: the vendor tool's UUID when it
    reports one, else a UUID derived from node name and PCI address (stable while the hardware stays put)."""
    if reported and reported.strip():
        return reported.strip()
    return str(uuid.uuid5(_UUID_NAMESPACE, f"{node_name}/{address}"))


def link_zones(addresses: Sequence[PciAddress], links: Sequence[GpuLink]) -> dict[PciAddress, int]:
    """MetaXLink zones: GPUs joined (directly or through others) by MetaXLink share a zone number 1, 2, …
    (numbered by their lowest PCI address); a GPU without MetaXLink to another listed GPU has zone 0."""
    members = set(addresses)
    parent = {a: a for a in members}

    def root(a: PciAddress) -> PciAddress:
        while parent[a] != a:
            a = parent[a]
        return a

    for link in links:
        if link.kind is LinkKind.MX and link.a in members and link.b in members:
            ra, rb = root(link.a), root(link.b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[PciAddress, list[PciAddress]] = {}
    for a in sorted(members):
        groups.setdefault(root(a), []).append(a)
    zones = dict.fromkeys(members, 0)
    number = 0
    for head in sorted(groups):
        if len(groups[head]) > 1:
            number += 1
            for a in groups[head]:
                zones[a] = number
    return zones


def shareable(functions: Sequence[PciFunction]) -> list[PciFunction]:
    """The functions gpu-device splits into sGPUs (`devices.plan_devices`' rule: bound to ``metax``, and VFs
    instead of a PF that has them), in PCI address order."""
    plan = devices.plan_devices(
        functions,
        settings=devices.NodeSettings(mode=devices.Mode.SGPU),
        shares=1,
        health={},
        iommu_enabled=False,
    )
    return [d.function for d in plan.devices.get(devices.Resource.SGPU, ())]


def hami_devices(
    inventory: NodeInventory,
    *,
    sgpu_shares: int = devices.DEFAULT_SHARES,
    qos_policy: devices.QosPolicy = devices.QosPolicy.BEST_EFFORT,
) -> list[dict[str, object]]:
    """HAMi's ``metax-tech.com/node-gpu-devices`` entries: one per `shareable` function."""
    shared = shareable(inventory.functions)
    zones = link_zones([f.address for f in shared], inventory.links)
    entries: list[dict[str, object]] = []
    for f in shared:
        health = inventory.health.get(f.address)
        memory = _memory_mib(inventory, [f.address])
        entries.append(
            {
                "uuid": device_uuid(inventory.node_name, f.address, inventory.uuids.get(f.address)),
                "bdf": f.address,
                "model": product_of(f, _name_of(inventory, f.address)),
                "totalDevCount": sgpu_shares,
                "totalCompute": TOTAL_COMPUTE,
                "totalVRam": memory or 0,
                "numa": f.numa_node if f.numa_node is not None and f.numa_node >= 0 else 0,
                "healthy": health is None or health.healthy,
                "qosPolicy": qos_policy.value,
                "linkZone": zones[f.address],
            }
        )
    return entries


def node_annotations(
    inventory: NodeInventory,
    *,
    sgpu_shares: int = devices.DEFAULT_SHARES,
    qos_policy: devices.QosPolicy = devices.QosPolicy.BEST_EFFORT,
) -> dict[str, str | None]:
    """Every annotation in OWNED_ANNOTATIONS: its value, or None to remove it."""
    entries = hami_devices(inventory, sgpu_shares=sgpu_shares, qos_policy=qos_policy)
    return {NODE_GPU_DEVICES: json.dumps(entries, separators=(",", ":")) if entries else None}


def removal() -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Labels and annotations patch that removes everything gpu-label wrote (uninstall)."""
    return dict.fromkeys(OWNED_LABELS), dict.fromkeys(OWNED_ANNOTATIONS)
