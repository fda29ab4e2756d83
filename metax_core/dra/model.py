"""What crosses the kubelet's DRA protocol, in the operator's words (the gRPC adapter maps it to the wire).

The kubelet names claims (`ClaimRef`); the driver answers per claim uid with a `ClaimOutcome`: the devices it
prepared (each with the CDI ids the runtime injects) or an error the kubelet shows on the pod. Health goes
the other way as `DeviceHealthReport`s.
"""

from __future__ import annotations

import enum

import attrs


@attrs.frozen
class ClaimRef:
    """One ResourceClaim as the kubelet names it in NodePrepareResources/NodeUnprepareResources."""

    namespace: str
    uid: str
    name: str


@attrs.frozen
class PreparedDevice:
    """One allocated device, prepared: the claim's requests it serves and what the runtime must inject."""

    pool: str
    device: str
    request_names: tuple[str, ...]
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@attrs.frozen
class ClaimOutcome:
    """The answer for one claim: its prepared devices, or ``error`` (then ``devices`` is empty)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""

    @classmethod
    def failed(cls, error: str) -> ClaimOutcome:
        return cls(error=error)


class HealthState(enum.Enum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@attrs.frozen
class DeviceHealthReport:
    """One published device's health, as `DRAResourceHealth.NodeWatchResources` streams it."""

    pool: str
    device: str
    state: HealthState
    message: str = ""
    updated_at: float = 0.0
    """Seconds since the epoch of the check that decided ``state``."""
    check_timeout_seconds: int = 0
    """How long the kubelet may trust it without a newer report (0: the kubelet's default)."""
