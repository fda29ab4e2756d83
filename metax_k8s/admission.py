"""AdmissionReview v1 in, AdmissionReview v1 out: the webhook's rules are the core's rules (R-WEBHOOK).

Why it exists: the API server asks the webhook about every create and update of the ClusterOperator (and of
the ``driver-config`` ConfigMap). What makes a spec valid is decided once, in the core:
`metax_core.spec.validation.parse` (every problem with its field path, all at once) and, for updates while a
driver rollout runs, `metax_core.rollout.rules.update_errors` (only ``enableRollout`` and ``pause`` may
change; metadata such as the rollout-confirm annotation is not spec and always passes), and, while firmware is
being flashed on some node, `metax_core.node.policy.firmware_edit_errors` (R-FW: the fields that decide what gets
flashed are locked; the nodes come from ``flashing_nodes``, asked only when such a field changes). ConfigMap edits go
through `metax_core.node.driver_config.parse` (unknown module parameters refused, R-MODPARAM). This module
only translates: request fields in, a refusal with one cause per field out. It never raises on bad input:
a request it cannot read is refused with a message saying why.

The refusal's message lists ``spec.<path>: <what is allowed>`` lines, which is what ``kubectl apply``
prints after ``admission webhook "…" denied the request:``; ``status.details.causes`` carries the same per
field for API clients.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from metax_core.dra import claims as dra_claims
from metax_core.errors import FieldError, InvalidSpec, MetaxError
from metax_core.node import driver_config, policy
from metax_core.rollout import rules
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.spec import validation

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
CLUSTER_OPERATOR_PATH = "/validate/clusteroperator"
DRIVER_CONFIG_PATH = "/validate/driver-config"
RESOURCE_CLAIM_PATH = "/validate/resourceclaim"
DRIVER_CONFIG_MAP = driver_config.CONFIGMAP_NAME
MAX_MESSAGE = 4000
"""The API server shows the message to the user; keep it readable when a document is very wrong."""


def _response(uid: str, errors: Sequence[FieldError], *, what: str) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": not errors}
    if errors:
        lines = [str(e) for e in errors]
        message = f"{what} is invalid ({len(errors)} problem{'s' if len(errors) != 1 else ''}):\n" + "\n".join(lines)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 4] + "\n..."
        response["status"] = {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": message,
            "details": {
                "causes": [{"reason": "FieldValueInvalid", "field": e.path, "message": e.message} for e in errors]
            },
        }
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _prefixed(errors: Sequence[FieldError], prefix: str) -> list[FieldError]:
    return [FieldError(f"{prefix}.{e.path}" if e.path else prefix, e.message) for e in errors]


def _request(review: object) -> Mapping[str, Any] | None:
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        return None
    request = review.get("request")
    return request if isinstance(request, Mapping) and isinstance(request.get("uid"), str) else None


def _upgrade_status(obj: Mapping[str, Any]) -> rollout_status.UpgradeStatus | None:
    """The stored rollout status, or None when there is none (or it cannot be read: then nothing is held)."""
    status = obj.get("status")
    document = status.get("upgradeStatus") if isinstance(status, Mapping) else None
    if not document:
        return None
    try:
        return rollout_status.from_document(document)
    except InvalidSpec as exc:
        log.warning("ignoring unreadable status.upgradeStatus in an admission request: %s", exc)
        return None


FlashingNodes = Callable[[], Collection[str]]
"""The nodes flashing firmware now (those labelled `metax_core.node.labels.FIRMWARE_FLASHING`); raises
`metax_core.errors.MetaxError` when the cluster cannot say."""


def _none_flashing() -> Collection[str]:
    return ()


def cluster_operator_errors(
    request: Mapping[str, Any], flashing_nodes: FlashingNodes = _none_flashing
) -> list[FieldError]:
    """Every reason to refuse a ClusterOperator create/update (paths from the object root: ``spec.…``)."""
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return [FieldError("", "the request carries no object")]
    try:
        new = validation.parse(obj)
    except InvalidSpec as exc:
        meta = [e for e in exc.errors if e.path in ("kind", "apiVersion", "metadata.name")]
        return [*meta, *_prefixed([e for e in exc.errors if e not in meta], "spec")]
    if request.get("operation") != "UPDATE":
        return []
    old_obj = request.get("oldObject")
    if not isinstance(old_obj, Mapping):
        return []
    try:
        old = validation.parse(old_obj)
    except InvalidSpec:
        return []  # the stored spec is invalid (written while the webhook was away): any fix is welcome
    errors = rules.update_errors(old, new, _upgrade_status(old_obj))
    return _prefixed([*errors, *_firmware_lock_errors(old, new, flashing_nodes)], "spec")


def _firmware_lock_errors(
    old: spec.ClusterOperatorSpec, new: spec.ClusterOperatorSpec, flashing_nodes: FlashingNodes
) -> list[FieldError]:
    if not policy.changed_firmware_fields(old.driver, new.driver):
        return []  # the nodes are asked only for such an edit
    try:
        nodes: Collection[str] | None = flashing_nodes()
    except MetaxError as exc:
        log.warning("cannot tell which nodes flash firmware: %s", exc)
        nodes = None
    return policy.firmware_edit_errors(old.driver, new.driver, nodes)


def driver_config_errors(request: Mapping[str, Any]) -> list[FieldError]:
    """Reasons to refuse an edit of the ``driver-config`` ConfigMap (other ConfigMaps always pass)."""
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return [FieldError("", "the request carries no object")]
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("name") != DRIVER_CONFIG_MAP:
        return []
    data = obj.get("data")
    if data is not None and not isinstance(data, Mapping):
        return [FieldError("data", "must be a mapping of keys to text")]
    try:
        driver_config.parse(data)
    except InvalidSpec as exc:
        return _prefixed(exc.errors, "data")
    return []


def resource_claim_errors(request: Mapping[str, Any]) -> list[FieldError]:
    """Reasons to refuse a ResourceClaim or ResourceClaimTemplate: a bad configuration for the MetaX driver
    (R-DRA; `metax_core.dra.claims.devices_spec_errors`, the check the driver repeats at prepare)."""
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return [FieldError("", "the request carries no object")]
    body = obj.get("spec")
    if not isinstance(body, Mapping):
        return []
    if obj.get("kind") == "ResourceClaimTemplate":
        inner = body.get("spec")
        return dra_claims.devices_spec_errors(
            inner.get("devices") if isinstance(inner, Mapping) else None, "spec.spec.devices"
        )
    return dra_claims.devices_spec_errors(body.get("devices"), "spec.devices")


def review(body: object, path: str, flashing_nodes: FlashingNodes = _none_flashing) -> dict[str, Any]:
    """The AdmissionReview response for ``body`` sent to ``path`` (`CLUSTER_OPERATOR_PATH` or `DRIVER_CONFIG_PATH`).

    Raises ValueError only when ``body`` is no AdmissionReview request at all (the server answers 400).
    """
    request = _request(body)
    if request is None:
        raise ValueError("expected an admission.k8s.io/v1 AdmissionReview with request.uid")
    uid = request["uid"]
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return _response(uid, [], what="")
    if path == CLUSTER_OPERATOR_PATH:
        errors = cluster_operator_errors(request, flashing_nodes)
        what = f"{spec.KIND} {(request.get('name') or spec.OBJECT_NAME)!s}"
    elif path == DRIVER_CONFIG_PATH:
        errors = driver_config_errors(request)
        what = f"ConfigMap {DRIVER_CONFIG_MAP}"
    elif path == RESOURCE_CLAIM_PATH:
        errors = resource_claim_errors(request)
        kind = (
            (request.get("object") or {}).get("kind", "ResourceClaim")
            if isinstance(request.get("object"), Mapping)
            else "ResourceClaim"
        )
        what = f"{kind} {request.get('namespace') or ''}/{request.get('name') or ''}"
    else:
        raise ValueError(f"no admission rules at {path!r}")
    if errors:
        log.info("refusing %s %s: %s", request.get("operation"), what, "; ".join(map(str, errors)))
    return _response(uid, errors, what=what)
