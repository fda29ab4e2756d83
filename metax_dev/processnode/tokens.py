"""A pod's ServiceAccount credentials: a TokenRequest bound to the pod, written where the process looks.

Why a module of its own: this is what makes a process on a process node an honest in-cluster client. The node
(authenticated as ``system:node:<name>``, so the Node authorizer and NodeRestriction decide) asks the API server
for a token of the pod's ServiceAccount bound to the pod object (default audience, ``expirationSeconds`` 3607
as the kubelet asks), and writes ``token``, ``ca.crt`` and ``namespace`` into the pod's service-account
directory; the process finds them through ``METAX_SERVICEACCOUNT_DIR`` (metax_k8s/client.py), and the client
re-reads the token file every minute. The token is renewed at 80 % of its lifetime, as the kubelet does, and
dies with the pod (bound object).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from metax_dev.controlplane import network

#: The kubelet's TokenRequest lifetime for projected service-account tokens.
EXPIRATION_SECONDS = 3607
#: Fraction of the lifetime after which the token is renewed (the kubelet's 80 %).
RENEW_AT = 0.8


class TokenError(Exception):
    """The API server refused the TokenRequest (the reason is in the text)."""


@attrs.frozen
class Token:
    value: str
    issued: dt.datetime
    expires: dt.datetime

    def renew_due(self, now: dt.datetime) -> bool:
        return now >= self.issued + (self.expires - self.issued) * RENEW_AT


def request(http: network.Https, pod: Mapping[str, Any], now: dt.datetime, seconds: int = EXPIRATION_SECONDS) -> Token:
    """POST ``serviceaccounts/<sa>/token`` bound to ``pod``."""
    meta = pod["metadata"]
    account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
    try:
        code, data = http.request("POST", path, body)
    except OSError as exc:
        raise TokenError(f"TokenRequest for {meta['namespace']}/{account}: {exc}") from exc
    if code >= 300:
        raise TokenError(f"TokenRequest for {meta['namespace']}/{account}: HTTP {code}: {data[:300]!r}")
    answer = json.loads(data)
    expires = dt.datetime.fromisoformat(answer["status"]["expirationTimestamp"].replace("Z", "+00:00"))
    return Token(answer["status"]["token"], now, expires)


def write(directory: Path, token: Token, ca: Path, namespace: str) -> None:
    """The three files of a service-account volume; the token is replaced atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / ".token.new"
    staging.write_text(token.value)
    staging.chmod(0o600)
    os.replace(staging, directory / "token")
    (directory / "ca.crt").write_bytes(ca.read_bytes())
    (directory / "namespace").write_text(namespace)
