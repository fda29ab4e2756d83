"""The ``vfioManager.vfioConfig`` entries (R-VFIO, §3.2.6.1): which GPUs of which nodes go to vfio-pci.

Why a module of its own: validation checks these entries when the spec is submitted, and vfio-manager
selects its node's GPUs with them; both read the same rules here. ``nodeName`` is a regular expression that
must match the WHOLE node name; when several entries match a node, the first one wins (an administrator reads
the list top-down). What happens to the selected GPUs on a node is `metax_core.node.vfio`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec.model import VfioConfigEntry

ALL = "all"


@attrs.frozen
class GpuSelection:
    """``all`` or an explicit set of indexes."""

    everything: bool = False
    indexes: frozenset[int] = frozenset()

    def selects(self, index: int) -> bool:
        return self.everything or index in self.indexes


NOTHING = GpuSelection()


def parse_gpus(text: str, *, path: str = "gpus") -> GpuSelection:
    """Parse ``"0,1,2"`` or ``"all"``; raise InvalidSpec naming ``path`` otherwise."""
    cleaned = text.strip()
    if cleaned.lower() == ALL:
        return GpuSelection(everything=True)
    parts = [p.strip() for p in cleaned.split(",")]
    if not cleaned or any(not (p.isascii() and p.isdigit()) for p in parts):
        raise InvalidSpec(
            [FieldError(path, f'must be "all" or comma-separated GPU indexes like "0,1,2", got {text!r}')]
        )
    indexes = [int(p) for p in parts]
    duplicates = sorted({i for i in indexes if indexes.count(i) > 1})
    if duplicates:
        raise InvalidSpec([FieldError(path, f"GPU index listed twice: {', '.join(map(str, duplicates))}")])
    return GpuSelection(indexes=frozenset(indexes))


def check_entries(entries: Sequence[VfioConfigEntry], *, path: str = "vfioManager.vfioConfig") -> list[FieldError]:
    """Every problem in a vfioConfig list (bad regex, bad gpus), for validation."""
    errors: list[FieldError] = []
    for i, entry in enumerate(entries):
        if not entry.node_name:
            errors.append(FieldError(f"{path}[{i}].nodeName", "must not be empty"))
        else:
            try:
                re.compile(entry.node_name)
            except re.error as exc:
                errors.append(FieldError(f"{path}[{i}].nodeName", f"is not a valid regular expression: {exc}"))
        try:
            parse_gpus(entry.gpus, path=f"{path}[{i}].gpus")
        except InvalidSpec as exc:
            errors.extend(exc.errors)
    return errors


def selection_for_node(entries: Sequence[VfioConfigEntry], node_name: str) -> GpuSelection:
    """The selection of the first entry whose regex matches the whole node name; nothing when none does."""
    for entry in entries:
        if re.fullmatch(entry.node_name, node_name):
            return parse_gpus(entry.gpus)
    return NOTHING
