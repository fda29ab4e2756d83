"""Preparing one claim: its CDI spec, the CDI ids the kubelet hands to the runtime, and the checkpoint.

Each prepared claim gets a CDI spec file of its own (kind `CLAIM_KIND`, file `spec_file_name`), so preparing
and unpreparing one claim never rewrites another's, and gpu-device's spec (kind ``metax-tech.com/gpu``) is
never touched. A device's entry brings its device nodes; the claim-wide edits (``METAX_VISIBLE_DEVICES``
listing every device of the claim on this node, the SDK the configuration asks for, sGPU sharing) sit at the
spec's top level, which the runtime applies once when any of the claim's devices is injected.

The checkpoint (`Checkpoint`, `render_checkpoint` / `parse_checkpoint`) records what is prepared, so a
restarted driver answers a repeated NodePrepareResources with the same devices and can unprepare claims
whose ResourceClaim is already gone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import versions
from metax_core.dra import claims, model, slices
from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import PciAddress
from metax_core.node import cdi
from metax_core.node import devices as plugin_devices
from metax_core.runtime import sdk

CLAIM_KIND = "metax-tech.com/claim"


def spec_file_name(claim_uid: str) -> str:
    """``metax-tech.com-claim_<uid>.json``: one file per claim in the CDI directory."""
    return f"{cdi.spec_file_name(CLAIM_KIND)[: -len('.json')]}_{claim_uid}.json"


def cdi_device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


class PrepareRefused(Exception):
    """The claim cannot be prepared on this node; the message is what the pod's events show."""


@attrs.frozen
class Inputs:
    """What preparing needs from the node, gathered by the driver."""

    published: Mapping[str, slices.PublishedDevice]
    """This node's published devices by name."""
    device_nodes: Mapping[PciAddress, tuple[str, ...]]
    installed_sdks: tuple[str, ...] = ()
    sdk_host_dir: str = sdk.HOST_DIR


@attrs.frozen
class Prepared:
    """A prepared claim: its answer to the kubelet and the CDI spec to write first."""

    outcome: model.ClaimOutcome
    spec: dict[str, Any]


def _claim_config(allocation: claims.Allocation) -> claims.GpuConfig:
    requests = sorted({d.request for d in allocation.devices})
    chosen = [allocation.config_for(r) for r in requests]
    merged = claims.GpuConfig()
    for request, config in zip(requests, chosen, strict=True):
        for field in ("maca_version", "sharing"):
            mine, theirs = getattr(config, field), getattr(merged, field)
            if mine is not None and theirs is not None and mine != theirs:
                raise PrepareRefused(
                    f"requests of one claim ask for different {field.replace('_', ' ')} ({request}: {mine}): "
                    "a claim's containers share one configuration"
                )
        merged = merged.merged(config)
    return merged


def _edits(config: claims.GpuConfig, addresses: Sequence[PciAddress], inputs: Inputs) -> dict[str, Any]:
    env = [f"{plugin_devices.VISIBLE_DEVICES_ENV}={','.join(addresses)}"]
    mounts = []
    if config.maca_version is not None:
        try:
            chosen = versions.resolve(config.maca_version, inputs.installed_sdks)
        except versions.NoMatchingVersion as exc:
            raise PrepareRefused(f"macaVersion {config.maca_version!r}: {exc}") from None
        oci = sdk.mount(inputs.sdk_host_dir, chosen)
        mounts.append({"hostPath": oci["source"], "containerPath": oci["destination"], "options": oci["options"]})
        env += [f"{name}={value}" for name, value in {**sdk.SET, sdk.RESOLVED_ENV: str(chosen)}.items()]
        env.append(f"{versions.ENV_VAR}={config.maca_version}")
    if config.sharing is not None:
        env += [
            f"{plugin_devices.SHARES_ENV}={config.sharing.shares}",
            f"{plugin_devices.SHARES_PER_GPU_ENV}={config.sharing.shares_per_gpu}",
            f"{plugin_devices.QOS_ENV}={config.sharing.qos_policy.value}",
        ]
    edits: dict[str, Any] = {"env": env}
    if mounts:
        edits["mounts"] = mounts
    return edits


def prepare(claim: model.ClaimRef, resource_claim: Mapping[str, Any], pool: str, inputs: Inputs) -> Prepared:
    """The CDI spec and the kubelet's answer for ``claim``; PrepareRefused with the reason when it cannot be
    prepared here (not allocated here, a device not published, a bad configuration, no matching SDK)."""
    uid = str((resource_claim.get("metadata") or {}).get("uid", ""))
    if uid != claim.uid:
        raise PrepareRefused(f"ResourceClaim {claim.namespace}/{claim.name} has uid {uid!r}, not {claim.uid!r}")
    try:
        allocation = claims.allocated(resource_claim, pool)
    except claims.NotAllocated as exc:
        raise PrepareRefused(str(exc)) from None
    except InvalidSpec as exc:
        raise PrepareRefused("; ".join(f"{e.path}: {e.message}" for e in exc.errors)) from None
    config = _claim_config(allocation)
    by_device: dict[str, list[str]] = {}
    for d in allocation.devices:
        if d.device not in inputs.published:
            raise PrepareRefused(f"device {d.device} of pool {pool} is not published on this node (any longer)")
        by_device.setdefault(d.device, []).append(d.request)
    names = sorted(by_device)
    addresses = [inputs.published[n].address for n in names]
    cdi_devices = []
    for name in names:
        published = inputs.published[name]
        nodes = tuple(inputs.device_nodes.get(published.address, ()))
        if not nodes:
            raise PrepareRefused(f"device {name} ({published.address}) has no device nodes on this host")
        cdi_devices.append(cdi.CdiDevice(cdi_device_name(claim.uid, name), nodes))
    try:
        spec = cdi.build_spec(cdi_devices, kind=CLAIM_KIND)
    except InvalidSpec as exc:
        raise PrepareRefused("; ".join(f"{e.path}: {e.message}" for e in exc.errors)) from None
    assert spec is not None  # at least one device: allocated() refuses an empty allocation
    spec["containerEdits"] = _edits(config, addresses, inputs)
    spec["cdiVersion"] = cdi.minimum_version(spec)
    shares = {d.device: d.share_id for d in allocation.devices}
    prepared = tuple(
        model.PreparedDevice(
            pool=pool,
            device=name,
            request_names=tuple(sorted(set(by_device[name]))),
            cdi_ids=(cdi.qualified_name(cdi_device_name(claim.uid, name), CLAIM_KIND),),
            share_id=shares.get(name),
        )
        for name in names
    )
    return Prepared(model.ClaimOutcome(devices=prepared), spec)


# --- the checkpoint ------------------------------------------------------------------------------------------

CHECKPOINT_VERSION = 1


@attrs.frozen
class PreparedClaim:
    claim: model.ClaimRef
    devices: tuple[model.PreparedDevice, ...]


@attrs.frozen
class Checkpoint:
    """Every claim this node's driver has prepared and not yet unprepared, by uid."""

    claims: Mapping[str, PreparedClaim] = attrs.field(factory=dict)

    def with_claim(self, entry: PreparedClaim) -> Checkpoint:
        return Checkpoint({**self.claims, entry.claim.uid: entry})

    def without(self, uid: str) -> Checkpoint:
        return Checkpoint({k: v for k, v in self.claims.items() if k != uid})


def _device_json(d: model.PreparedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pool": d.pool,
        "device": d.device,
        "requestNames": list(d.request_names),
        "cdiDeviceIDs": list(d.cdi_ids),
    }
    if d.share_id is not None:
        out["shareID"] = d.share_id
    return out


def _body(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        uid: {
            "namespace": c.claim.namespace,
            "name": c.claim.name,
            "devices": [_device_json(d) for d in c.devices],
        }
        for uid, c in sorted(checkpoint.claims.items())
    }


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def render_checkpoint(checkpoint: Checkpoint) -> str:
    body = _body(checkpoint)
    return json.dumps({"version": CHECKPOINT_VERSION, "claims": body, "checksum": _checksum(body)}, indent=2) + "\n"


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint in ``text``; InvalidSpec naming what is wrong (unreadable, other version, checksum)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSpec([FieldError("checkpoint", f"not JSON: {exc}")]) from None
    if not isinstance(doc, dict) or doc.get("version") != CHECKPOINT_VERSION:
        found = doc.get("version") if isinstance(doc, dict) else None
        raise InvalidSpec([FieldError("version", f"must be {CHECKPOINT_VERSION}, got {found!r}")])
    body = doc.get("claims")
    if not isinstance(body, dict):
        raise InvalidSpec([FieldError("claims", "must be an object of claims by uid")])
    if doc.get("checksum") != _checksum(body):
        raise InvalidSpec([FieldError("checksum", "does not match the claims (the file was changed or cut short)")])
    out: dict[str, PreparedClaim] = {}
    try:
        for uid, entry in body.items():
            ref = model.ClaimRef(str(entry["namespace"]), uid, str(entry["name"]))
            prepared = tuple(
                model.PreparedDevice(
                    pool=str(d["pool"]),
                    device=str(d["device"]),
                    request_names=tuple(str(r) for r in d["requestNames"]),
                    cdi_ids=tuple(str(c) for c in d["cdiDeviceIDs"]),
                    share_id=d.get("shareID"),
                )
                for d in entry["devices"]
            )
            out[uid] = PreparedClaim(ref, prepared)
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidSpec([FieldError("claims", f"an entry lacks or mistypes {exc}")]) from None
    return Checkpoint(out)
