"""One telemetry reading of a node's GPUs, and the exporter's sample built from the readings over time.

Why: the hardware port answers "what do the GPUs say now" (`Telemetry`); the exporter must also remember
what a GPU said last, so that a GPU that stops answering keeps its series, says so in ``mx_gpu_state`` and
shows its growing age, instead of its series vanishing (R-EXPORTER; dcgm-exporter's users complain of the
latter). `advance` and `failed` are that memory, as pure functions of the previous sample and the time.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from metax_core.inventory import GpuHealth, GpuMetrics, PciAddress, PciFunction
from metax_core.node import devices

NOT_ANSWERING = "not answering the sampler"
"""The ``unavailable_reason`` of every GPU while a whole sampling fails (the tool hangs, fails, prints garbage)."""


@attrs.frozen
class GpuReading:
    """What one MetaX function says now: its sysfs record, health, and telemetry (None: it did not answer)."""

    function: PciFunction
    health: GpuHealth
    metrics: GpuMetrics | None = None


@attrs.frozen
class Telemetry:
    """Every MetaX function of the node, read once (one mx-smi run), with the versions the tool printed."""

    gpus: tuple[GpuReading, ...]
    driver_version: str | None = None
    maca_version: str | None = None
    bios_version: str | None = None


@attrs.frozen
class GpuSample:
    """A function in the exporter's sample: now's health, the last telemetry it gave and when."""

    function: PciFunction
    available: bool
    reason: str
    metrics: GpuMetrics | None
    """The last telemetry this function answered with (kept while it does not answer)."""
    answered_at: float | None
    """Monotonic seconds of that answer; None when it never answered."""


@attrs.frozen
class Sample:
    """The exporter's latest view: what `/metrics` serves (never waiting on the hardware)."""

    gpus: tuple[GpuSample, ...] = ()
    sampled_at: float | None = None
    """When the last sampling succeeded (monotonic seconds); None before the first one."""
    driver_version: str = ""
    maca_version: str = ""
    bios_version: str = ""


def advance(previous: Sample, reading: Telemetry, at: float) -> Sample:
    """The sample after a successful reading at ``at``: functions gone from sysfs are dropped, a function that
    did not answer keeps its last telemetry and time, and is unavailable with the reason the port gave."""
    before: Mapping[PciAddress, GpuSample] = {g.function.address: g for g in previous.gpus}
    gpus: list[GpuSample] = []
    for r in sorted(reading.gpus, key=lambda g: g.function.address):
        old = before.get(r.function.address)
        answered = r.metrics is not None
        available = r.health.healthy and (answered or not _speaks_to_tool(r.function))
        reason = "" if available else (r.health.reason or ("" if answered else NOT_ANSWERING))
        gpus.append(
            GpuSample(
                function=r.function,
                available=available,
                reason=reason,
                metrics=r.metrics if answered else (old.metrics if old else None),
                answered_at=at if answered else (old.answered_at if old else None),
            )
        )
    return Sample(
        gpus=tuple(gpus),
        sampled_at=at,
        driver_version=reading.driver_version or "",
        maca_version=reading.maca_version or "",
        bios_version=reading.bios_version or "",
    )


def failed(previous: Sample) -> Sample:
    """The sample after a sampling that failed as a whole: every GPU keeps its series and last telemetry, and
    is unavailable because it does not answer; ``sampled_at`` stays, so the sample's age grows."""
    return attrs.evolve(
        previous,
        gpus=tuple(attrs.evolve(g, available=False, reason=NOT_ANSWERING) for g in previous.gpus),
    )


def _speaks_to_tool(function: PciFunction) -> bool:
    """Whether the vendor tool should report telemetry for it (bound to the native driver)."""
    return devices.is_native(function)
