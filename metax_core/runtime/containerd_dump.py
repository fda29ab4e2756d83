"""What our change did to containerd's effective configuration, read from two ``containerd config dump`` outputs.

Why a module of its own: the agent never restarts a containerd whose configuration lost anything but what we
add (C4, docs/container-runtime.md "The round"). The dry run loads the node's files twice with the host's own
binary: *before* (the root file without our import, in a scratch file beside it) and *after* (with our
drop-in). containerd prints every setting, defaults included, so the two dumps differ exactly by what the files
change. Allowed: our runtime handler, our drop-in in ``imports``, and on 1.7 ``enable_cdi`` turned on where no
file set it. Anything else — a runtime, a registry mirror, a setting that went or changed — is a loss, and the
agent takes its files back (`RuntimeConfigInvalid`, naming the keys).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import tomlkit
import tomlkit.exceptions

from metax_core.runtime import handler

LIMIT = 5
"""How many differing keys a message names."""


def _load(text: str) -> dict[str, Any] | None:
    try:
        return dict(tomlkit.parse(text).unwrap())
    except tomlkit.exceptions.ParseError:
        return None


def _key(parts: Sequence[str]) -> str:
    return ".".join(p if p.replace("_", "").replace("-", "").isalnum() else repr(p) for p in parts)


def _strip_ours(doc: dict[str, Any], cdi_added: bool) -> None:
    plugins = doc.get("plugins")
    for section in plugins.values() if isinstance(plugins, dict) else ():
        if not isinstance(section, dict):
            continue
        runtimes = (section.get("containerd") or {}).get("runtimes")
        if isinstance(runtimes, dict):
            runtimes.pop(handler.RUNTIME_HANDLER, None)
        if cdi_added:
            section.pop("enable_cdi", None)


def _walk(before: Any, after: Any, parts: tuple[str, ...]) -> Iterator[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key not in after:
                yield f"{_key((*parts, key))} lost"
            else:
                yield from _walk(before[key], after[key], (*parts, key))
        for key in after:
            if key not in before:
                yield f"{_key((*parts, key))} added"
    elif before != after:
        yield f"{_key(parts)} changed from {before!r} to {after!r}"


def differences(before: str, after: str, *, ours: Sequence[str], cdi_added: bool = False) -> tuple[str, ...]:
    """The settings that differ between dump ``before`` and dump ``after`` other than ours (the runtime handler,
    the files of ``ours`` in ``imports`` — the drop-in, the scratch root, the root itself — and ``enable_cdi``
    when our drop-in turned it on); ``("unreadable dump",)`` when either is not TOML."""
    old, new = _load(before), _load(after)
    if old is None or new is None:
        return ("containerd config dump printed no TOML",)
    for doc in (old, new):
        _strip_ours(doc, cdi_added)
        imports = doc.pop("imports", None)
        doc["imports"] = sorted(str(i) for i in imports or () if str(i) not in ours)
    return tuple(_walk(old, new, ()))


def summary(found: Sequence[str]) -> str:
    shown = "; ".join(found[:LIMIT])
    return shown + (f"; and {len(found) - LIMIT} more" if len(found) > LIMIT else "")
