"""Which GPUs of a node go to vfio-pci for KubeVirt (R-VFIO, §3.2.6.1), and how the result is published.

GPUs are indexed by sorted PCI address: the PFs, or the VFs when the node runs virtualisation (any PF has
VFs). ``nodeName`` is a regular expression that must match the WHOLE node name. When several entries match a
node, the first one wins (documented: an administrator reads the list top-down).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import VFIO_DRIVER, FunctionKind, PciAddress, PciFunction
from metax_core.spec import VfioConfigEntry

ANNOTATION = "metax-tech.com/gpu-vfio"
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


def indexed_gpus(functions: Sequence[PciFunction]) -> list[PciFunction]:
    """The node's GPUs in index order: VFs when virtualisation is on (any VF exists), else PFs."""
    vfs = [f for f in functions if f.kind is FunctionKind.VF]
    chosen = vfs if vfs else [f for f in functions if f.kind is FunctionKind.PF]
    return sorted(chosen, key=lambda f: f.address)


@attrs.frozen
class VfioPlan:
    """Which functions to bind to vfio-pci, which to give back to the native driver, unknown indexes."""

    to_vfio: tuple[PciAddress, ...]
    to_native: tuple[PciAddress, ...]
    index_of: Mapping[PciAddress, int]
    missing_indexes: tuple[int, ...]
    """Indexes asked for that the node does not have (reported, not fatal)."""


def plan(functions: Sequence[PciFunction], selection: GpuSelection, *, vfio_driver: str = VFIO_DRIVER) -> VfioPlan:
    """Bind the selected GPUs that are not on vfio-pci yet; give back unselected ones that are."""
    gpus = indexed_gpus(functions)
    index_of = {f.address: i for i, f in enumerate(gpus)}
    to_vfio = tuple(f.address for i, f in enumerate(gpus) if selection.selects(i) and f.driver != vfio_driver)
    to_native = tuple(f.address for i, f in enumerate(gpus) if not selection.selects(i) and f.driver == vfio_driver)
    missing = tuple(sorted(i for i in selection.indexes if i >= len(gpus)))
    return VfioPlan(to_vfio=to_vfio, to_native=to_native, index_of=index_of, missing_indexes=missing)


def annotation_value(results: Mapping[int, bool]) -> str:
    """The node annotation: ``{"0":1,"1":1,"3":0}`` — index → 1 bound, 0 failed (keys in numeric order)."""
    return json.dumps({str(i): int(ok) for i, ok in sorted(results.items())}, separators=(",", ":"))
