"""The ``vfioManager.vfioConfig`` entries (R-VFIO, §3.2.6.1): which GPUs of which nodes go to vfio-pci.

Why a module of its own: validation checks these entries when the spec is submitted, and vfio-manager
selects its node's GPUs with them; both read the same rules here. ``nodeName`` is a regular expression that
must match the WHOLE node name; when several entries match a node, the first one wins (an administrator reads
the list top-down). What happens to the selected GPUs on a node is `metax_core.node.vfio`.

``nodeName`` patterns come from anyone who can edit the ClusterOperator and are matched inside the operator
and vfio-manager, so they are compiled with RE2 (the engine Kubernetes uses): matching takes time linear in
the node name whatever the pattern, and a pattern RE2 cannot run in linear time (backreferences,
lookarounds) is refused with RE2's reason. The syntax is RE2's, a near subset of Python's (docs/configuration.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import limits
from metax_core.spec.model import VfioConfigEntry

ALL = "all"
MAX_PATTERN = 1024
_GPUS = re.compile(limits.GPUS_PATTERN)


class PatternError(ValueError):
    """A nodeName pattern RE2 refuses; the message says why."""


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled with RE2 (linear-time matching); PatternError when RE2 refuses it.

    RE2 is imported on the first pattern: its library is 2.5 MiB of every process's memory, and most clusters
    give no ``vfioConfig`` (the operator's P3 at 5,000 nodes, the node agents' P8)."""
    import re2

    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"is longer than {MAX_PATTERN} characters")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"is not a regular expression RE2 accepts: {reason}") from None


def node_name_matches(pattern: str, node_name: str) -> bool:
    """Whether ``pattern`` matches the WHOLE ``node_name`` (RE2, full match)."""
    return compile_pattern(pattern).fullmatch(node_name) is not None


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
    if text.strip(" ") == ALL:
        return GpuSelection(everything=True)
    if len(text) > MAX_PATTERN or not _GPUS.fullmatch(text):
        shown = repr(text if len(text) <= 60 else text[:57] + "...")
        raise InvalidSpec([FieldError(path, f'must be "all" or comma-separated GPU indexes like "0,1,2", got {shown}')])
    indexes = [int(p.strip(" ")) for p in text.split(",")]
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
                compile_pattern(entry.node_name)
            except PatternError as exc:
                errors.append(FieldError(f"{path}[{i}].nodeName", str(exc)))
        try:
            parse_gpus(entry.gpus, path=f"{path}[{i}].gpus")
        except InvalidSpec as exc:
            errors.extend(exc.errors)
    return errors


def selection_for_node(entries: Sequence[VfioConfigEntry], node_name: str) -> GpuSelection:
    """The selection of the first entry whose regex matches the whole node name; nothing when none does."""
    for entry in entries:
        try:
            matched = node_name_matches(entry.node_name, node_name)
        except PatternError:
            continue  # refused by validation; an unvalidated entry never matches
        if matched:
            return parse_gpus(entry.gpus)
    return NOTHING
