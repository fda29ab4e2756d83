"""What the exporter serves for a sample: every family's samples, label values in `names.Family.label_keys` order.

Why pure: which series exist, with which labels and values, is the exporter's whole contract with Prometheus
and the dashboards; computing it from the sample, the holdings and the time (passed in, never read) makes it
testable without a socket and keeps ``/metrics`` a plain rendering of the latest sample (a scrape never waits
on the hardware). A GPU held by several containers (sGPU shares) has one series per holder, each with the
GPU's value (as dcgm-exporter does): per-node sums take ``max by (Hostname, pci_address)`` first. The health
families only map each GPU's verdict (`telemetry.GpuSample.verdict`): ``mx_gpu_state`` 0 exactly when it is
unusable, its severity, one series per fault in force.
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
        (m.uuid if m is not None else ""),  # libmxsml's; mx-smi's summary does not print it (docs/exporter.md)
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
    families: tuple[names.Family, ...] = names.ALL,
) -> tuple[Series, ...]:
    """Every one of ``families`` (default `names.ALL`), in that order (a family without samples is still
    described); ``now`` matters only to `names.AGES`."""
    out: dict[names.Family, list[tuple[LabelValues, float]]] = {f: [] for f in families}
    if any(f.per_gpu for f in families):
        _per_gpu(out, sample, holdings, options)
    for origin in origins(sample, holdings, options):
        if origin.family in out:
            out[origin.family].extend((labels, max(0.0, now - at)) for labels, at in origin.samples)
    for collector in names.Collector:
        s = stats.get(collector, CollectorStats())
        key = (collector.value,)
        if names.COLLECTION_ERRORS in out:
            out[names.COLLECTION_ERRORS].append((key, float(s.errors)))
        if s.duration is not None and names.COLLECTION_DURATION in out:
            out[names.COLLECTION_DURATION].append((key, s.duration))
        if s.ok is not None and names.COLLECTOR_SUCCESS in out:
            out[names.COLLECTOR_SUCCESS].append((key, 1.0 if s.ok else 0.0))
    if names.BUILD_INFO in out:
        out[names.BUILD_INFO].append(((options.version,), 1.0))
    if sample.sampled_at is not None and names.DRIVER_INFO in out:
        out[names.DRIVER_INFO].append(((options.hostname, sample.driver_version, sample.maca_version), 1.0))
    return tuple(Series(f, tuple(samples)) for f, samples in out.items())


def origins(sample: Sample, holdings: attribution.Holdings, options: Options) -> tuple[Series, ...]:
    """The `names.AGES` families with each series' origin (the monotonic time it counts from) as its value:
    a scrape at ``now`` serves ``now - origin``. Depends on the sample only, so it is computed per sampling."""
    gpu_ages: list[tuple[LabelValues, float]] = []
    for gpu in sample.gpus:
        if gpu.answered_at is None:
            continue
        base = _gpu_labels(gpu, sample, options)
        gpu_ages += [((*base, *holder), gpu.answered_at) for holder, _ in _holders(gpu, holdings)]
    sampled = (((), sample.sampled_at),) if sample.sampled_at is not None else ()
    return (Series(names.GPU_SAMPLE_AGE, tuple(gpu_ages)), Series(names.SAMPLE_AGE, sampled))


class _Drop(list[tuple[LabelValues, float]]):
    """Where samples of a family not asked for go."""

    def append(self, item: tuple[LabelValues, float]) -> None:
        pass


def _per_gpu(
    asked: dict[names.Family, list[tuple[LabelValues, float]]],
    sample: Sample,
    holdings: attribution.Holdings,
    options: Options,
) -> None:
    drop = _Drop()
    out = {f: asked.get(f, drop) for f in names.ALL}
    values = [(f, v) for f, v in _VALUES if f in asked]
    memory = names.MEMORY_TOTAL in asked or names.MEMORY_USED in asked or names.MEMORY_USAGE in asked
    for gpu in sample.gpus:
        base = _gpu_labels(gpu, sample, options)
        m = gpu.metrics
        for holder, holding in _holders(gpu, holdings):
            labels = (*base, *holder)
            out[names.GPU_STATE].append(((gpu.reason, *labels), 1.0 if gpu.available else 0.0))
            out[names.HEALTH_SEVERITY].append((labels, float(gpu.verdict.severity)))
            for fault in gpu.verdict.faults:
                out[names.HEALTH_FAULT].append(((fault.kind.value, fault.severity.word, *labels), 1.0))
            if holding is not None:
                out[names.GPU_HOLDERS].append(((holding.resource, *labels), float(holding.count)))
            if m is None:
                continue
            for family, value in values:
                v = value(m)
                if v is not None:
                    out[family].append((labels, float(v)))
            if memory:
                _memory(out, (names.Memory.VRAM.value, *labels), m.memory_used_bytes, m.memory_total_bytes)
                _memory(out, (names.Memory.XTT.value, *labels), m.xtt_used_bytes, m.xtt_total_bytes)


def _memory(
    out: Mapping[names.Family, list[tuple[LabelValues, float]]],
    labels: LabelValues,
    used: int | None,
    total: int | None,
) -> None:
    """One memory type's three families (KB, as mx-exporter serves them), when the reading has both numbers."""
    if total is None or used is None:
        return
    out[names.MEMORY_TOTAL].append((labels, float(total // 1024)))
    out[names.MEMORY_USED].append((labels, float(used // 1024)))
    if total > 0:
        out[names.MEMORY_USAGE].append((labels, 100.0 * used / total))
