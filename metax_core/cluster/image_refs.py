"""Which image a component runs: ``<registry>/<image>:<version>``, pinned by digest when the release says so.

Why a module of its own: a release (``./run release``, docs/images.md) pushes every image and writes each one's
manifest digest into the packaged chart's ``operator.imageDigests``; the chart hands the map to the operator in
one environment variable, and the operator renders every component with ``<registry>/<image>:<version>@<digest>``
(R-RELEASE: the node pulls exactly what was pushed, by digest; the tag stays for people). Digests are content
addresses, so a mirror that copied the images (``metax-dev mirror``) serves the same ones under another registry.

The variable crosses a process (the chart writes it, the operator reads it): this module owns its name and form,
a JSON object of image name to ``sha256:<64 hex>``; the chart writes it with ``toJson``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from metax_core.errors import FieldError, InvalidSpec

DIGESTS_ENV: Final = "METAX_IMAGE_DIGESTS"
"""The operator's environment variable: the release's image digests (chart value ``operator.imageDigests``)."""
CHART_VALUE: Final = "operator.imageDigests"
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_IMAGE_NAME: Final = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def reference(registry: str, image: str, version: str, digest: str | None = None) -> str:
    """``registry/image:version``, with ``@digest`` when the release pinned it (a registry with a port or a path
    is used as given: ``127.0.0.1:5000/metax`` → ``127.0.0.1:5000/metax/<image>:<version>``)."""
    prefix = f"{registry}/" if registry else ""
    pinned = f"@{digest}" if digest else ""
    return f"{prefix}{image}:{version}{pinned}"


def digest_problems(digests: Mapping[Any, Any], field: str = CHART_VALUE) -> list[FieldError]:
    """Every entry that is not ``<image name>: sha256:<64 lowercase hex>``, named by its path."""
    errors = []
    for name, digest in digests.items():
        if not isinstance(name, str) or not _IMAGE_NAME.fullmatch(name):
            errors.append(FieldError(f"{field}", f"{name!r} is not an image name (like metax-gpu-label)"))
        elif not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            errors.append(
                FieldError(
                    f"{field}.{name}", f"must be a manifest digest like sha256:<64 lowercase hex>, got {digest!r}"
                )
            )
    return errors


def encode_digests(digests: Mapping[str, str]) -> str:
    """The variable's value for `digests` (sorted keys, so the same release renders the same Deployment)."""
    if errors := digest_problems(digests):
        raise InvalidSpec(errors)
    return json.dumps(dict(sorted(digests.items())), separators=(",", ":"))


def decode_digests(text: str) -> dict[str, str]:
    """The digests `text` (the variable's value) holds; "" means none. InvalidSpec names the variable."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSpec([FieldError(DIGESTS_ENV, f"must be a JSON object of image name to digest: {exc}")]) from exc
    if not isinstance(value, dict):
        raise InvalidSpec([FieldError(DIGESTS_ENV, f"must be a JSON object of image name to digest, got {text!r}")])
    if errors := digest_problems(value, DIGESTS_ENV):
        raise InvalidSpec(errors)
    return {str(k): str(v) for k, v in value.items()}
