"""Where the webhook's TLS material lives in the cluster: its Secret, and the caBundle of its configuration.

Why it exists: every operator replica (and a restarted one) must serve the same certificate, and the API
server must trust it. So the material is kept in the Secret ``<name>`` of the operator namespace (``tls.crt``,
``tls.key``, ``ca.crt``, ``ca.key``, ``ca-previous.crt``; the chart creates it empty and removes it on
uninstall); writes are create-or-replace with the
read resourceVersion, so two replicas racing keep one result (the loser re-reads it). The
ValidatingWebhookConfiguration ``<name>`` gets the CA bundle with a merge patch of each webhook's
``clientConfig.caBundle`` (the chart leaves it empty; Helm's three-way merge keeps ours on upgrade).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from metax_core.errors import Conflict, NotFound
from metax_core.wire import meta
from metax_k8s.api import Api
from services.webhook import certs

log = logging.getLogger(__name__)

FIELD_MANAGER = "metax-operator-webhook"
PART_OF = meta.PART_OF


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(data: object) -> bytes:
    return base64.b64decode(data) if isinstance(data, str) else b""


def read(api: Api, namespace: str, name: str) -> tuple[certs.Material | None, str | None]:
    """The stored material (None when absent or incomplete) and the Secret's resourceVersion (None: no Secret)."""
    try:
        secret = api.get("v1", "Secret", name, namespace)
    except NotFound:
        return None, None
    data = secret.get("data") or {}
    parts = {k: _unb64(data.get(k)) for k in ("ca.crt", "ca.key", "tls.crt", "tls.key", "ca-previous.crt")}
    version = secret.get("metadata", {}).get("resourceVersion")
    if not all(parts[k] for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")):
        return None, version
    material = certs.Material(
        ca=certs.KeyPair(parts["ca.crt"], parts["ca.key"]),
        serving=certs.KeyPair(parts["tls.crt"], parts["tls.key"]),
        previous_ca=parts["ca-previous.crt"],
    )
    return material, version


def write(api: Api, namespace: str, name: str, material: certs.Material, version: str | None) -> bool:
    """Store ``material``; False when another writer got there first (re-read and use theirs)."""
    data = {
        "tls.crt": _b64(material.serving.cert),
        "tls.key": _b64(material.serving.key),
        "ca.crt": _b64(material.ca.cert),
        "ca.key": _b64(material.ca.key),
    }
    try:
        if version is None:
            if material.previous_ca:
                data["ca-previous.crt"] = _b64(material.previous_ca)
            metadata = {
                "name": name,
                "namespace": namespace,
                "labels": {meta.MANAGED_BY_LABEL: meta.MANAGED_BY, meta.PART_OF_LABEL: PART_OF},
            }
            api.create(
                {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "data": data},
                field_manager=FIELD_MANAGER,
            )
        else:
            # Only the data, with the read version as precondition: the chart's labels and Helm's ownership
            # annotations stay as they are.
            patch: dict[str, Any] = {
                "metadata": {"resourceVersion": version},
                "data": {**data, "ca-previous.crt": _b64(material.previous_ca) if material.previous_ca else None},
            }
            api.merge_patch("v1", "Secret", name, patch, namespace=namespace, field_manager=FIELD_MANAGER)
    except Conflict:
        log.info("webhook Secret %s/%s was written by another replica; using theirs", namespace, name)
        return False
    return True


def patch_ca_bundle(api: Api, name: str, bundle: bytes) -> bool:
    """Put ``bundle`` into every webhook of the configuration ``name``; False when it does not exist (yet)."""
    try:
        config = api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", name)
    except NotFound:
        return False
    encoded = _b64(bundle)
    webhooks = config.get("webhooks") or []
    if all(w.get("clientConfig", {}).get("caBundle") == encoded for w in webhooks):
        return True
    for webhook in webhooks:
        webhook.setdefault("clientConfig", {})["caBundle"] = encoded
    # The whole list (a merge patch replaces lists), with resourceVersion as precondition: a concurrent
    # helm upgrade is never overwritten with a stale copy; the next check retries.
    patch = {"metadata": {"resourceVersion": config["metadata"]["resourceVersion"]}, "webhooks": webhooks}
    try:
        api.merge_patch(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            name,
            patch,
            field_manager=FIELD_MANAGER,
        )
    except Conflict:
        log.info("webhook configuration %s changed while patching caBundle; retrying on the next check", name)
        return False
    log.info("caBundle of ValidatingWebhookConfiguration %s updated", name)
    return True
