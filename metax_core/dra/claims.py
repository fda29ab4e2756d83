"""What a ResourceClaim's allocation says to the MetaX driver on one node, and the claim configuration.

The kubelet names a claim; the driver reads the ResourceClaim (``resource.k8s.io/v1``) and takes from
``status.allocation.devices`` the results for its own driver and pool (`allocated`), and the opaque
configuration for its driver that applies to each request (`configs_for`): the DeviceClass's first
(``FromClass``), then the claim's (``FromClaim``), later entries overriding earlier ones field by field.

The configuration (`GpuConfig`, ``apiVersion: gpu.metax-tech.com/v1alpha1``, ``kind: GpuConfig``) is what
the seeds let a pod choose: the MXMACA SDK by version prefix (``macaVersion: maca-2.18``, R-MACA, resolved
by `metax_core.versions.resolve` like ``METAX_MACA_VERSION``), and sGPU sharing (``sharing.shares`` of the GPU's
``sharing.sharesPerGpu`` under ``sharing.qosPolicy``, R-SGPU). `parse_config` refuses anything else naming
the field and what is allowed; the same function checks parameters at admission and at prepare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import versions
from metax_core.dra import DRIVER
from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import devices as plugin_devices

CONFIG_API_VERSION = f"{DRIVER}/v1alpha1"
CONFIG_KIND = "GpuConfig"
MAX_SHARES = 64


@attrs.frozen
class Sharing:
    shares: int
    shares_per_gpu: int = plugin_devices.DEFAULT_SHARES
    qos_policy: plugin_devices.QosPolicy = plugin_devices.QosPolicy.BEST_EFFORT


@attrs.frozen
class GpuConfig:
    """A claim's configuration for MetaX devices (every field optional)."""

    maca_version: str | None = None
    """A version request (``maca-2``, ``maca-2.18``) for the SDK mounted into the claim's containers."""
    sharing: Sharing | None = None

    def merged(self, later: GpuConfig) -> GpuConfig:
        """This configuration with ``later``'s fields where it sets them."""
        return GpuConfig(
            maca_version=later.maca_version if later.maca_version is not None else self.maca_version,
            sharing=later.sharing if later.sharing is not None else self.sharing,
        )


def _int(value: object, path: str, low: int, high: int, errors: list[FieldError]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append(FieldError(path, f"must be a whole number from {low} to {high}, got {value!r}"))
        return None
    return value


def _sharing(value: object, path: str, errors: list[FieldError]) -> Sharing | None:
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, "must be an object with shares, sharesPerGpu, qosPolicy"))
        return None
    for key in sorted(set(value) - {"shares", "sharesPerGpu", "qosPolicy"}):
        errors.append(FieldError(f"{path}.{key}", "unknown field (allowed: shares, sharesPerGpu, qosPolicy)"))
    per_gpu = _int(
        value.get("sharesPerGpu", plugin_devices.DEFAULT_SHARES), f"{path}.sharesPerGpu", 1, MAX_SHARES, errors
    )
    shares = _int(value.get("shares"), f"{path}.shares", 1, per_gpu or MAX_SHARES, errors)
    policies = {p.value: p for p in plugin_devices.QosPolicy}
    raw_policy = value.get("qosPolicy", plugin_devices.QosPolicy.BEST_EFFORT.value)
    policy = policies.get(raw_policy) if isinstance(raw_policy, str) else None
    if policy is None:
        errors.append(FieldError(f"{path}.qosPolicy", f"must be one of {', '.join(policies)}, got {raw_policy!r}"))
    if shares is None or per_gpu is None or policy is None:
        return None
    return Sharing(shares, per_gpu, policy)


def parse_config(parameters: object, path: str = "parameters") -> GpuConfig:
    """A `GpuConfig` from opaque parameters; InvalidSpec naming every bad field."""
    if not isinstance(parameters, Mapping):
        raise InvalidSpec([FieldError(path, f"must be a {CONFIG_KIND} object")])
    errors: list[FieldError] = []
    if parameters.get("apiVersion") != CONFIG_API_VERSION:
        errors.append(FieldError(f"{path}.apiVersion", f"must be {CONFIG_API_VERSION!r}"))
    if parameters.get("kind") != CONFIG_KIND:
        errors.append(FieldError(f"{path}.kind", f"must be {CONFIG_KIND!r}"))
    allowed = {"apiVersion", "kind", "macaVersion", "sharing"}
    for key in sorted(set(parameters) - allowed):
        errors.append(FieldError(f"{path}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})"))
    maca = parameters.get("macaVersion")
    if maca is not None:
        if not isinstance(maca, str):
            errors.append(FieldError(f"{path}.macaVersion", 'must be a string like "maca-2.18"'))
            maca = None
        else:
            try:
                versions.parse_request(maca)
            except InvalidSpec as exc:
                errors += [FieldError(f"{path}.macaVersion", e.message) for e in exc.errors]
    sharing = _sharing(parameters["sharing"], f"{path}.sharing", errors) if "sharing" in parameters else None
    if errors:
        raise InvalidSpec(errors)
    return GpuConfig(maca_version=maca, sharing=sharing)


def devices_spec_errors(devices: object, path: str) -> list[FieldError]:
    """Problems with this driver's configuration in a claim's ``spec.devices`` (a ResourceClaim's, or a
    template's ``spec.spec.devices``), named from ``path``: what the webhook refuses at admission, with the
    same `parse_config` the driver applies at prepare. Other drivers' entries are not ours to judge."""
    if not isinstance(devices, Mapping):
        return []
    errors: list[FieldError] = []
    for index, entry in enumerate(devices.get("config") or ()):
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER:
            continue
        try:
            parse_config(opaque.get("parameters"), f"{path}.config[{index}].opaque.parameters")
        except InvalidSpec as exc:
            errors += exc.errors
    return errors


# --- the allocation ---------------------------------------------------------------------------------------


@attrs.frozen
class AllocatedDevice:
    """One result of the claim's allocation for this driver and pool."""

    request: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False


@attrs.frozen
class Allocation:
    """The claim's devices on this node and the configuration of each request."""

    devices: tuple[AllocatedDevice, ...]
    configs: Mapping[str, GpuConfig]
    """Request name → its merged configuration (requests without one are absent)."""

    def config_for(self, request: str) -> GpuConfig:
        """The configuration of a (sub)request: its own, else its parent request's (``gpus/large`` → ``gpus``)."""
        return self.configs.get(request) or self.configs.get(request.partition("/")[0]) or GpuConfig()


class NotAllocated(Exception):
    """The claim has no allocation for this driver on this node (yet, or any longer)."""


def allocated(claim: Mapping[str, Any], pool: str) -> Allocation:
    """This node's part of ``claim``'s allocation; NotAllocated when there is none, InvalidSpec naming a bad
    configuration field (``status.allocation.devices.config[i].opaque.parameters.<field>``)."""
    allocation = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    results = [
        AllocatedDevice(
            request=str(r.get("request", "")),
            pool=str(r.get("pool", "")),
            device=str(r.get("device", "")),
            share_id=r.get("shareID") or None,
            admin_access=bool(r.get("adminAccess")),
        )
        for r in allocation.get("results") or ()
        if r.get("driver") == DRIVER and r.get("pool") == pool
    ]
    if not results:
        raise NotAllocated(f"claim has no device of {DRIVER} in pool {pool!r} allocated")
    requests = sorted({d.request for d in results} | {d.request.partition("/")[0] for d in results})
    return Allocation(devices=tuple(results), configs=configs_for(allocation.get("config") or (), requests))


def configs_for(entries: Sequence[Mapping[str, Any]], requests: Sequence[str]) -> dict[str, GpuConfig]:
    """Each request's configuration from the allocation's config entries: class entries first, then claim
    entries, in order; an entry without ``requests`` applies to all. Other drivers' entries are ignored."""
    errors: list[FieldError] = []
    ordered = sorted(enumerate(entries), key=lambda e: (0 if e[1].get("source") == "FromClass" else 1, e[0]))
    out: dict[str, GpuConfig] = {}
    for index, entry in ordered:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRIVER:
            continue
        path = f"status.allocation.devices.config[{index}].opaque.parameters"
        try:
            config = parse_config(opaque.get("parameters"), path)
        except InvalidSpec as exc:
            errors += exc.errors
            continue
        for request in entry.get("requests") or requests:
            out[request] = out.get(request, GpuConfig()).merged(config)
    if errors:
        raise InvalidSpec(errors)
    return out
