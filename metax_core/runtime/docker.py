"""Docker's ``daemon.json`` for the ``metax`` runtime (C4): the smallest recorded edit, through ``json``.

Docker has no drop-in directory: the one file is edited. We add ``runtimes.metax = {"path": <wrapper>}`` and,
on Docker 25.0 up to 28.1 (CDI exists from 25.0 and is on by default from 28.2), ``features.cdi = true`` — only
when ``features.cdi`` is absent: an administrator's explicit ``false`` stays (and the reason says CDI is off).
Every other key, and the keys' order, stay; the text is re-serialised with two-space indentation (JSON keeps
no comments or layout worth preserving; the record keeps the exact text before us, which uninstall restores
byte for byte when nobody changed the file since). The ``metax`` runtime is never made the
``default-runtime``: a RuntimeClass (with cri-dockerd) or ``--runtime metax`` selects it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.runtime import detect, handler
from metax_core.runtime.record import RootEdit
from metax_core.wire import host

PATH = host.DOCKER_CONFIG
RUNTIME_KEY = f"runtimes.{handler.RUNTIME_HANDLER}"
CDI_KEY = "features.cdi"


def cdi_feature_needed(version: detect.Version) -> bool:
    """``features.cdi`` turns CDI on for Docker 25.0 to 28.1 (none before; on by default after)."""
    return (25, 0) <= version[:2] < (28, 2)


@attrs.frozen
class Configured:
    text: str
    edits: tuple[RootEdit, ...]
    cdi: bool
    """Whether containers get CDI devices on this daemon (False: only the wrapper injects)."""


def _load(text: str | None, path: str) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError(path, f"is not valid JSON: {exc}")]) from None
    if not isinstance(doc, dict):
        raise InvalidSpec([FieldError(path, "must be a JSON object")])
    return doc


def _render(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


def configure(text: str | None, *, version: detect.Version, wrapper: str, path: str = PATH) -> Configured:
    doc = _load(text, path)
    edits: list[RootEdit] = []
    runtimes = doc.get("runtimes")
    if runtimes is not None and not isinstance(runtimes, dict):
        raise InvalidSpec([FieldError(f"{path}: runtimes", "must be an object of runtime name to {path: ...}")])
    want = {"path": wrapper}
    if runtimes is None:
        doc["runtimes"] = {handler.RUNTIME_HANDLER: want}
        edits.append(RootEdit(RUNTIME_KEY, json.dumps(want), created_key=True))
    elif runtimes.get(handler.RUNTIME_HANDLER) != want:
        if handler.RUNTIME_HANDLER in runtimes:
            raise InvalidSpec(
                [FieldError(f"{path}: {RUNTIME_KEY}", f"is {runtimes[handler.RUNTIME_HANDLER]!r}, not ours ({want!r})")]
            )
        runtimes[handler.RUNTIME_HANDLER] = want
        edits.append(RootEdit(RUNTIME_KEY, json.dumps(want), created_key=False))
    features = doc.get("features")
    if features is not None and not isinstance(features, dict):
        raise InvalidSpec([FieldError(f"{path}: features", "must be an object")])
    if cdi_feature_needed(version) and (features is None or "cdi" not in features):
        if features is None:
            features = doc["features"] = {}
        features["cdi"] = True
        edits.append(RootEdit(CDI_KEY, "true", created_key=len(features) == 1))
    cdi = version[:2] >= (25, 0) and (features or {}).get("cdi", version[:2] >= (28, 2)) is True
    out = _render(doc) if edits else (text if text is not None else _render(doc))
    return Configured(out, tuple(edits), cdi)


def unconfigure(text: str, edits: tuple[RootEdit, ...], path: str = PATH) -> str:
    """``text`` with our recorded keys removed where they still hold what we set."""
    doc = _load(text, path)
    for edit in edits:
        parent_key, key = edit.key.split(".", 1)
        parent = doc.get(parent_key)
        if not isinstance(parent, dict) or key not in parent:
            continue
        if parent[key] != json.loads(edit.value):
            continue  # someone changed it: theirs now
        del parent[key]
        if edit.created_key and not parent:
            del doc[parent_key]
    return _render(doc)


def handler_loaded(info: Mapping[str, Any], wrapper: str) -> tuple[bool, str]:
    """Whether the running dockerd (``GET /info``) has runtime ``metax`` running ``wrapper``."""
    runtimes = info.get("Runtimes")
    entry = runtimes.get(handler.RUNTIME_HANDLER) if isinstance(runtimes, Mapping) else None
    if not isinstance(entry, Mapping):
        return False, f"the running dockerd has no runtime {handler.RUNTIME_HANDLER!r}"
    if entry.get("path") != wrapper:
        return False, f"runtime {handler.RUNTIME_HANDLER!r} runs {entry.get('path')!r}, not {wrapper!r}"
    return True, f"dockerd runtime {handler.RUNTIME_HANDLER!r} loaded ({wrapper})"
