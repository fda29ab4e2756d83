"""One telemetry reading of a node's GPUs, and the exporter's sample built from the readings over time.

Why: the hardware port answers "what do the GPUs say now" (`Telemetry`); the exporter must also remember
what a GPU said last, so that a GPU that stops answering keeps its series and shows its growing age instead of
its series vanishing (R-EXPORTER; dcgm-exporter's users complain of the latter), and it must judge each GPU as
gpu-device and the DRA driver do: its readings stepped through the core's verdict machine
(`metax_core.health.verdict`, R-HEALTH), so one noisy reading neither fails nor clears a GPU and a sampling
that failed is unknown, not unhealthy. `advance` and `failed` are that memory, as pure functions of the
previous sample and the time.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from metax_core.health import verdict
from metax_core.health.faults import Severity
from metax_core.inventory import GpuHealth, GpuMetrics, PciAddress, PciFunction


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
    """A function in the exporter's sample: its verdict, the last telemetry it gave and when."""

    function: PciFunction
    verdict: verdict.Verdict
    """What the verdict machine says of it (a VF's includes its PF's faults: `verdict.verdicts`)."""
    metrics: GpuMetrics | None
    """The last telemetry this function answered with (kept while it does not answer)."""
    answered_at: float | None
    """Monotonic seconds of that answer; None when it never answered."""

    @property
    def available(self) -> bool:
        """Whether it can run work (``mx_gpu_state`` 1): anything but unusable; a degraded GPU still works."""
        return self.verdict.severity is not Severity.UNUSABLE

    @property
    def reason(self) -> str:
        """Why it is not available (the verdict's words); empty while it is."""
        return "" if self.available else self.verdict.describe()


@attrs.frozen
class Sample:
    """The exporter's latest view: what `/metrics` serves (never waiting on the hardware)."""

    gpus: tuple[GpuSample, ...] = ()
    sampled_at: float | None = None
    """When the last sampling succeeded (monotonic seconds); None before the first one."""
    driver_version: str = ""
    maca_version: str = ""
    bios_version: str = ""
    board: verdict.Board = verdict.Board()
    """The verdict machine's memory of every function (streaks, when the tool last answered)."""
    recheck: bool = False
    """The last reading showed a fault not in force yet: read again after `verdict.Rules.recheck`."""


def advance(previous: Sample, reading: Telemetry, at: float, rules: verdict.Rules = verdict.RULES) -> Sample:
    """The sample after a successful reading at ``at``: functions gone from sysfs are dropped, a function that
    did not answer keeps its last telemetry and time; every function's faults step the verdict machine."""
    before: Mapping[PciAddress, GpuSample] = {g.function.address: g for g in previous.gpus}
    ordered = sorted(reading.gpus, key=lambda g: g.function.address)
    functions = [r.function for r in ordered]
    stepped = verdict.step(
        previous.board, [f.address for f in functions], {r.function.address: r.health for r in ordered}, at, rules
    )
    judged = verdict.verdicts(stepped.board, functions)
    gpus: list[GpuSample] = []
    for r in ordered:
        old = before.get(r.function.address)
        answered = r.metrics is not None
        gpus.append(
            GpuSample(
                function=r.function,
                verdict=judged[r.function.address],
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
        board=stepped.board,
        recheck=stepped.recheck,
    )


def failed(previous: Sample, at: float, rules: verdict.Rules = verdict.RULES, failure: str = "") -> Sample:
    """The sample after a sampling at ``at`` that failed as a whole (``failure`` says why): unknown, not
    unhealthy. Every GPU keeps its series, last telemetry and verdict; once no sampling has succeeded for
    ``rules.unknown_grace`` seconds every GPU also has the degraded fault HealthUnknown. ``sampled_at``
    stays, so the sample's age grows."""
    functions = [g.function for g in previous.gpus]
    stepped = verdict.step(previous.board, [f.address for f in functions], None, at, rules, failure=failure)
    judged = verdict.verdicts(stepped.board, functions)
    return attrs.evolve(
        previous,
        gpus=tuple(attrs.evolve(g, verdict=judged[g.function.address]) for g in previous.gpus),
        board=stepped.board,
        recheck=False,
    )
