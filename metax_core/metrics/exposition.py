"""What the exporter serves for a sample: every family's samples, label values in `names.Family.label_keys` order.

Why pure: which series exist, with which labels and values, is the exporter's whole contract with Prometheus
and the dashboards; computing it from the sample, the holdings and the time (passed in, never read) makes it
testable without a socket and keeps ``/metrics`` a plain rendering of the latest sample (a scrape never waits
on the hardware). A GPU held by several containers (sGPU shares) has one series per holder, each with the
GPU's value (as dcgm-exporter does): per-node sums take ``max by (Hostname, pci_address)`` first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from metax_core.inventory import GpuMetrics
from metax_core.metrics import attribution, names
from metax_core.metrics.telemetry import GpuSample, Sample

LabelValues = tuple[str, ...]


@attrs.frozen
class Series:
    """One family's samples: (label values in ``family.label_keys(exported)`` order, value)."""

    family: names.Family
    samples: tuple[tuple[LabelValues, float], ...]


@attrs.frozen
class CollectorStats:
    """How a collector's samplings went: the last one's duration and outcome, failures so far."""

    duration: float | None = None
    ok: bool | None = None
    errors: int = 0


@attrs.frozen
class Options:
    hostname: str
    exported_pod_labels: bool = False
    """Label holders ``exported_namespace``/``exported_pod``/``exported_container`` as mx-exporter does."""
    version: str = ""


_NO_HOLDER: LabelValues = ("", "", "")

_VALUES: tuple[tuple[names.Family, Callable[[GpuMetrics], float | None]], ...] = (
    (names.GPU_USAGE, lambda m: m.utilization_percent),
    (names.BOARD_POWER, lambda m: m.power_milliwatts),
    (names.POWER_LIMIT, lambda m: m.power_cap_milliwatts),
    (names.CHIP_HOTSPOT_TEMP, lambda m: m.temperature_celsius),
)


def _gpu_labels(gpu: GpuSample, sample: Sample, options: Options) -> LabelValues:
    m = gpu.metrics
    return (
        str(m.index) if m is not None else "",
        "",  # uuid: libmxsml's; mx-smi's summary does not print it (docs/exporter.md)
        gpu.function.address,
        options.hostname,
        sample.driver_version,
        sample.bios_version,
        (m.name if m is not None else ""),
        "0",
    )


def _holders(
    gpu: GpuSample, holdings: attribution.Holdings
) -> tuple[tuple[LabelValues, attribution.Holding | None], ...]:
    held = holdings.get(gpu.function.address, ())
    if not held:
        return ((_NO_HOLDER, None),)
    return tuple(((h.holder.namespace, h.holder.pod, h.holder.container), h) for h in held)


def render(
    sample: Sample,
    holdings: attribution.Holdings,
    stats: Mapping[names.Collector, CollectorStats],
    options: Options,
    now: float,
) -> tuple[Series, ...]:
    """Every family of `names.ALL`, in that order (a family without samples is still described)."""
    out: dict[names.Family, list[tuple[LabelValues, float]]] = {f: [] for f in names.ALL}
    for gpu in sample.gpus:
        base = _gpu_labels(gpu, sample, options)
        m = gpu.metrics
        for holder, holding in _holders(gpu, holdings):
            labels = (*base, *holder)
            out[names.GPU_STATE].append(((gpu.reason, *labels), 1.0 if gpu.available else 0.0))
            if holding is not None:
                out[names.GPU_HOLDERS].append(((holding.resource, *labels), float(holding.count)))
            if gpu.answered_at is not None:
                out[names.GPU_SAMPLE_AGE].append((labels, max(0.0, now - gpu.answered_at)))
            if m is None:
                continue
            for family, value in _VALUES:
                v = value(m)
                if v is not None:
                    out[family].append((labels, float(v)))
            if m.memory_total_bytes is not None and m.memory_used_bytes is not None:
                vram = (names.Memory.VRAM.value, *labels)
                out[names.MEMORY_TOTAL].append((vram, float(m.memory_total_bytes // 1024)))
                out[names.MEMORY_USED].append((vram, float(m.memory_used_bytes // 1024)))
                if m.memory_total_bytes > 0:
                    out[names.MEMORY_USAGE].append((vram, 100.0 * m.memory_used_bytes / m.memory_total_bytes))
    if sample.sampled_at is not None:
        out[names.SAMPLE_AGE].append(((), max(0.0, now - sample.sampled_at)))
    for collector in names.Collector:
        s = stats.get(collector, CollectorStats())
        key = (collector.value,)
        out[names.COLLECTION_ERRORS].append((key, float(s.errors)))
        if s.duration is not None:
            out[names.COLLECTION_DURATION].append((key, s.duration))
        if s.ok is not None:
            out[names.COLLECTOR_SUCCESS].append((key, 1.0 if s.ok else 0.0))
    out[names.BUILD_INFO].append(((options.version,), 1.0))
    if sample.sampled_at is not None:
        out[names.DRIVER_INFO].append(((options.hostname, sample.driver_version, sample.maca_version), 1.0))
    return tuple(Series(f, tuple(samples)) for f, samples in out.items())
