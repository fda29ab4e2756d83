"""Bounds on every number, list and free string of the spec: one table that the converter enforces (with the
field's path) and the CRD generator writes as ``minimum``/``maximum``/``maxItems``/``maxLength``/``pattern``.

Why a table of its own: the validator (and so the webhook) and the API server must agree on what is
storable; with one table they cannot drift. Every integer has a documented bound (docs/configuration.md):
nothing above int64 reaches the API server, and nothing absurd (a health check every 10²² seconds) passes.
Patterns here are written for both engines: Python matches them with ``fullmatch`` and the CRD anchors them
as ``^(...)$`` (Go's ``$`` without the m flag is the end of text, like ``fullmatch``; so no trailing newline
slips through either). Only ASCII classes are used (``[0-9]``, never ``\\d`` or ``\\s``, which differ).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from metax_core.spec import model as spec

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
MAX_NODES = 100_000
"""Upper bound of an absolute node count (maxParallel, replicas, ...): far above any real cluster."""
DAY_SECONDS = 86_400
DAY_MS = DAY_SECONDS * 1000

PERCENT_PATTERN = r"(100|[1-9]?[0-9])%"
"""A percentage from 0% to 100%, no spaces, no leading zeros, ASCII digits."""
DURATION_PATTERN = r"[0-9]{1,12}(ms|s|m|h)?"
"""pauseDuration as a string: milliseconds ("10000") or a duration ("10s", "500ms", "2m", "1h")."""
GPUS_PATTERN = r" *(all|[0-9]{1,4}( *, *[0-9]{1,4})*) *"
"""vfioConfig gpus as a string: "all" or comma-separated indexes ("0,1,2"; ASCII spaces around them allowed)."""


@attrs.frozen
class Range:
    minimum: int
    maximum: int

    def __str__(self) -> str:
        return f"between {self.minimum} and {self.maximum}"


INT_RANGES: Mapping[tuple[type, str], Range] = {
    (spec.GpuDevice, "healthy_interval"): Range(0, DAY_SECONDS),
    (spec.GpuDevice, "sgpu_shares"): Range(1, 1024),
    (spec.ExporterService, "port"): Range(1, 65535),
    (spec.Exporter, "sample_interval"): Range(1, 3600),
    (spec.UpgradePolicy, "max_failure_threshold"): Range(0, MAX_NODES),
    (spec.Drain, "timeout_seconds"): Range(1, DAY_SECONDS),
    (spec.UpgradeStep, "pause_duration"): Range(0, 30 * DAY_MS),
    (spec.Toleration, "toleration_seconds"): Range(0, 365 * DAY_SECONDS),
}
"""Every plain integer field (the converter refuses a field that is missing here: see `range_of`)."""

INT_OR_PERCENT_MAX = MAX_NODES
"""The integer form of every int-or-percent field (maxParallel, maxUnavailable, replicas, toleration)."""

MAX_ITEMS: Mapping[tuple[type, str], int] = {
    (spec.ClusterOperatorSpec, "image_pull_secrets"): 64,
    (spec.ClusterOperatorSpec, "tolerations"): 64,
    (spec.PodSpecOverrides, "tolerations"): 64,
    (spec.UpgradePolicy, "upgrade_steps"): 100,
    (spec.VfioManager, "vfio_config"): 256,
    (spec.MacaPayload, "images"): 64,
}

MAX_LENGTH: Mapping[tuple[type, str], int] = {
    (spec.ClusterOperatorSpec, "registry"): 255,
    (spec.DriverPayload, "name"): 255,
    (spec.DriverPayload, "version"): 128,
    (spec.DriverPayload, "registry"): 255,
    (spec.MacaPayload, "registry"): 255,
    (spec.VfioConfigEntry, "node_name"): 1024,
    (spec.ExporterService, "external_name"): 253,
    (spec.Toleration, "key"): 316,
    (spec.Toleration, "value"): 63,
}
MAX_STRING = 4096
"""Any other string (an image reference, a Secret name): long enough for every real value."""


def range_of(cl: type, name: str) -> Range:
    return INT_RANGES.get((cl, name), Range(INT64_MIN, INT64_MAX))
