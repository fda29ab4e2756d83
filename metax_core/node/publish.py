"""What a node agent writes to its Node: only the keys that differ from what the Node already shows.

Why: a patch per round would be a write per node every few seconds in a steady cluster (P-goal: none), and
a patch that re-sends every key would flap labels others changed meanwhile. Agents ask for the full set of
keys they own (value, or None to remove) and patch only the difference; an empty difference is no write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def changes(current: Mapping[str, str] | None, desired: Mapping[str, str | None]) -> dict[str, str | None]:
    """The keys of ``desired`` whose value differs on the object; None (remove) only for keys present."""
    have = current or {}
    out: dict[str, str | None] = {}
    for key, value in desired.items():
        if value is None:
            if key in have:
                out[key] = None
        elif have.get(key) != value:
            out[key] = value
    return out


def node_metadata(node: Mapping[str, Any] | None) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """(labels, annotations) of a raw Node object (empty when absent)."""
    meta = (node or {}).get("metadata") or {}
    return meta.get("labels") or {}, meta.get("annotations") or {}
