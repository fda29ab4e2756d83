"""The metric families the data-exporter serves: names, help, type and label keys (one owner, R-EXPORTER).

The ``mx_*`` families keep the names, units and label keys of MetaX's own mx-exporter (its default counter
set), so existing dashboards and alerts keep working: per-GPU labels ``deviceId`` (mx-smi's index), ``uuid``,
``Hostname``, ``driver_version``, ``bios_version``, ``modelName``, ``die_id``, plus the holder's
``namespace``/``pod``/``container`` (or mx-exporter's ``exported_*`` spelling, `pod_label_keys`), memory in KB
and power in milliwatts. Each GPU's health verdict (R-HEALTH: the same one gpu-device and the DRA driver
show) is under ``metax_gpu_health_``; our own operational families are under ``metax_exporter_``.
"""

from __future__ import annotations

import enum

import attrs


class Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    INFO = "info"


EXPORTER_PORT = 9400
"""Where ``/metrics`` listens by default: the exporter container's port ``metrics`` (`metax_core.cluster.workloads`)."""

# Per-GPU label keys (mx-exporter's spelling).
DEVICE_ID = "deviceId"
UUID = "uuid"
HOSTNAME = "Hostname"
DRIVER_VERSION = "driver_version"
BIOS_VERSION = "bios_version"
MODEL_NAME = "modelName"
DIE_ID = "die_id"
PCI_ADDRESS = "pci_address"
"""Ours: the function's PCI address (a VF has its own; mx-smi's index alone is not stable across VF changes)."""

# Family-specific label keys.
MEMORY_TYPE = "type"
UNAVAILABLE_REASON = "unavailable_reason"
FAULT = "fault"
"""A fault kind's name (`metax_core.health.faults.FaultKind` value, e.g. ``FellOffBus``, ``Thermal``)."""
SEVERITY = "severity"
"""A fault's severity word: ``degraded`` or ``unusable``."""
COLLECTOR = "collector"
MACA_VERSION = "maca_version"
VERSION = "version"
RESOURCE = "resource"

# Holder labels: Kubernetes' spelling (default) or mx-exporter's (``exported_pod_labels``).
NAMESPACE = "namespace"
POD = "pod"
CONTAINER = "container"
EXPORTED_PREFIX = "exported_"


def pod_label_keys(exported: bool) -> tuple[str, str, str]:
    """``(namespace, pod, container)`` label keys; mx-exporter's ``exported_*`` ones when ``exported``."""
    keys = (NAMESPACE, POD, CONTAINER)
    return tuple(EXPORTED_PREFIX + k for k in keys) if exported else keys  # type: ignore[return-value]


GPU_LABELS: tuple[str, ...] = (DEVICE_ID, UUID, PCI_ADDRESS, HOSTNAME, DRIVER_VERSION, BIOS_VERSION, MODEL_NAME, DIE_ID)
"""The labels of every per-GPU series, before its family's own and the holder's."""


class Memory(enum.Enum):
    VRAM = "vram"
    XTT = "xtt"


@attrs.frozen
class Family:
    """One metric family: ``labels`` are its own keys, placed before `GPU_LABELS` when ``per_gpu``."""

    name: str
    help: str
    kind: Kind = Kind.GAUGE
    labels: tuple[str, ...] = ()
    per_gpu: bool = True
    unit: str = ""

    def label_keys(self, exported: bool = False) -> tuple[str, ...]:
        """Every label key of a sample of this family, in order."""
        if not self.per_gpu:
            return self.labels
        return (*self.labels, *GPU_LABELS, *pod_label_keys(exported))


GPU_USAGE = Family("mx_gpu_usage", "GPU utilisation in percent", unit="percent")
MEMORY_USAGE = Family("mx_memory_usage", "VRAM and system memory (xtt) use in percent", labels=(MEMORY_TYPE,))
MEMORY_TOTAL = Family("mx_memory_total", "Total VRAM and system memory (xtt) in KB", labels=(MEMORY_TYPE,), unit="KB")
MEMORY_USED = Family("mx_memory_used", "VRAM and system memory (xtt) used in KB", labels=(MEMORY_TYPE,), unit="KB")
BOARD_POWER = Family("mx_board_power", "Board power in milliwatts", unit="mW")
POWER_LIMIT = Family("mx_power_limit", "Board power limit (cap) in milliwatts", unit="mW")
CHIP_HOTSPOT_TEMP = Family("mx_chip_hotspot_temp", "Chip hotspot temperature in degrees Celsius", unit="celsius")
GPU_STATE = Family(
    "mx_gpu_state",
    "GPU state: 0 (not available: its health verdict is unusable, see unavailable_reason) or 1 (available)",
    labels=(UNAVAILABLE_REASON,),
)

MX_FAMILIES: tuple[Family, ...] = (
    GPU_USAGE,
    MEMORY_USAGE,
    MEMORY_TOTAL,
    MEMORY_USED,
    BOARD_POWER,
    POWER_LIMIT,
    CHIP_HOTSPOT_TEMP,
    GPU_STATE,
)
"""The mx-exporter families the exporter fills from either telemetry source (libmxsml or mx-smi)."""

NOT_FROM_MX_SMI: tuple[str, ...] = (
    "mx_mxlk_bw",
    "mx_mxlk_speed",
    "mx_mxlk_width",
    "mx_mxlk_traffic_total_bytes",
    "mx_mxlk_aer_count",
    "mx_topo_info",
    "mx_ecc_error_count",
    "mx_ras_count",
    "mx_driver_eid_errors",
    "mx_sdk_eid_errors",
)
"""mx-exporter families mx-exporter reads through libmxsml, which mx-smi cannot fill and the libmxsml binding
(metax_hw/mxsml.py, a subset) does not read yet (docs/exporter.md)."""

# The health verdict (R-HEALTH, `metax_core.health`).
HEALTH_SEVERITY = Family(
    "metax_gpu_health_severity",
    "The GPU's health verdict: 0 fine, 1 degraded (works, takes no new work), 2 unusable",
)
HEALTH_FAULT = Family(
    "metax_gpu_health_fault",
    "1 for each fault in force on the GPU (its kind and severity); a fine GPU has no series",
    labels=(FAULT, SEVERITY),
)

HEALTH_FAMILIES: tuple[Family, ...] = (HEALTH_SEVERITY, HEALTH_FAULT)
"""The verdict machine's view of every function (`metax_core.health.verdict`), over the exporter's readings."""

# Our own operational families.
GPU_SAMPLE_AGE = Family(
    "metax_exporter_gpu_sample_age_seconds",
    "Seconds since this GPU last answered the sampler (grows while it does not)",
    unit="seconds",
)
GPU_HOLDERS = Family(
    "metax_exporter_gpu_holders",
    "Devices of this GPU held by the pod's container (a whole GPU, VF or vfio-gpu: 1; sGPU: its shares)",
    labels=(RESOURCE,),
)
SAMPLE_AGE = Family(
    "metax_exporter_sample_age_seconds",
    "Seconds since the last complete telemetry sample (grows while the hardware does not answer)",
    per_gpu=False,
    unit="seconds",
)
COLLECTION_DURATION = Family(
    "metax_exporter_collection_duration_seconds",
    "How long the last sampling of the collector took",
    labels=(COLLECTOR,),
    per_gpu=False,
    unit="seconds",
)
COLLECTION_ERRORS = Family(
    "metax_exporter_collection_errors",
    "Samplings of the collector that failed since the exporter started (telemetry: health readings that were unknown)",
    kind=Kind.COUNTER,
    labels=(COLLECTOR,),
    per_gpu=False,
)
COLLECTOR_SUCCESS = Family(
    "metax_exporter_collector_success",
    "Whether the collector's last sampling succeeded (1) or failed (0)",
    labels=(COLLECTOR,),
    per_gpu=False,
)
BUILD_INFO = Family("metax_exporter_build", "The exporter's version", kind=Kind.INFO, labels=(VERSION,), per_gpu=False)
DRIVER_INFO = Family(
    "metax_exporter_driver",
    "The node's MetaX kernel driver and MACA versions as mx-smi reports them",
    kind=Kind.INFO,
    labels=(HOSTNAME, DRIVER_VERSION, MACA_VERSION),
    per_gpu=False,
)

OWN_FAMILIES: tuple[Family, ...] = (
    GPU_SAMPLE_AGE,
    GPU_HOLDERS,
    SAMPLE_AGE,
    COLLECTION_DURATION,
    COLLECTION_ERRORS,
    COLLECTOR_SUCCESS,
    BUILD_INFO,
    DRIVER_INFO,
)

ALL: tuple[Family, ...] = MX_FAMILIES + HEALTH_FAMILIES + OWN_FAMILIES

AGES: tuple[Family, ...] = (GPU_SAMPLE_AGE, SAMPLE_AGE)
"""The families whose values change with the time of the scrape; every other one changes only per sampling
(so the exporter renders those once per sampling and these on each scrape)."""
PER_SAMPLING: tuple[Family, ...] = tuple(f for f in ALL if f not in AGES)


class Collector(enum.Enum):
    """What the sampler reads, each counted on its own (``collector`` label)."""

    TELEMETRY = "telemetry"
    """The GPUs (sysfs inventory + one mx-smi run)."""
    POD_RESOURCES = "pod_resources"
    """The kubelet's PodResources List (who holds which GPU)."""


def exposed_name(family: Family) -> str:
    """The sample name Prometheus stores: counters get ``_total``, info metrics ``_info``."""
    if family.kind is Kind.COUNTER:
        return family.name + "_total"
    if family.kind is Kind.INFO:
        return family.name + "_info"
    return family.name
