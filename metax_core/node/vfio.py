"""Which GPUs of a node go to vfio-pci for KubeVirt (R-VFIO, §3.2.6.1), and how the result is published.

GPUs are indexed by sorted PCI address: the PFs, or the VFs when the node runs virtualisation (any PF has
VFs). ``nodeName`` is a regular expression that must match the WHOLE node name. When several entries match a
node, the first one wins (documented: an administrator reads the list top-down).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import VFIO_DRIVER, FunctionKind, PciAddress, PciFunction
from metax_core.spec import vfio_config
from metax_core.wire import event_reasons

ANNOTATION = "metax-tech.com/gpu-vfio"


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


def _held_for_vfio(function: PciFunction, vfio_driver: str, native_loaded: bool) -> bool:
    """On vfio-pci, or left half-way by an interrupted bind or return (unbound with a vfio-pci override, or
    unbound while the native driver is loaded and could have it)."""
    if function.driver == vfio_driver:
        return True
    if function.driver is None:
        return function.driver_override == vfio_driver or native_loaded
    return False


def plan(
    functions: Sequence[PciFunction],
    selection: vfio_config.GpuSelection,
    *,
    vfio_driver: str = VFIO_DRIVER,
    native_loaded: bool = False,
) -> VfioPlan:
    """Bind the selected GPUs that are not on vfio-pci yet; give back unselected ones that are on it, or that
    an interrupted bind or return left unbound (``native_loaded``: the native driver is there to take them)."""
    gpus = indexed_gpus(functions)
    index_of = {f.address: i for i, f in enumerate(gpus)}
    to_vfio = tuple(f.address for i, f in enumerate(gpus) if selection.selects(i) and f.driver != vfio_driver)
    to_native = tuple(
        f.address
        for i, f in enumerate(gpus)
        if not selection.selects(i) and _held_for_vfio(f, vfio_driver, native_loaded)
    )
    missing = tuple(sorted(i for i in selection.indexes if i >= len(gpus)))
    return VfioPlan(to_vfio=to_vfio, to_native=to_native, index_of=index_of, missing_indexes=missing)


def annotation_value(results: Mapping[int, bool]) -> str:
    """The node annotation: ``{"0":1,"1":1,"3":0}`` — index → 1 bound, 0 failed (keys in numeric order)."""
    return json.dumps({str(i): int(ok) for i, ok in sorted(results.items())}, separators=(",", ":"))


def parse_annotation(value: str | None) -> dict[int, bool]:
    """The annotation read back (index → bound); InvalidSpec naming the annotation when it is not that shape."""
    if not value:
        return {}
    problem = FieldError(ANNOTATION, 'must be a JSON object of GPU index to 1 (bound) or 0 (failed), like {"0":1}')
    try:
        document = json.loads(value)
    except ValueError:
        raise InvalidSpec([problem]) from None
    if not isinstance(document, dict):
        raise InvalidSpec([problem])
    parsed: dict[int, bool] = {}
    for key, bound in document.items():
        if not (isinstance(key, str) and key.isdigit() and type(bound) is int and bound in (0, 1)):
            raise InvalidSpec([problem])
        parsed[int(key)] = bool(bound)
    return parsed


IOMMU_DISABLED = event_reasons.IOMMU_DISABLED
"""Event reason and readiness word when GPUs are selected for vfio-pci on a node without an IOMMU."""


def group_conflicts(functions: Sequence[PciFunction], selection: vfio_config.GpuSelection) -> Mapping[PciAddress, str]:
    """Selected GPUs that share an IOMMU group with an unselected MetaX GPU: VFIO hands out whole groups, so
    binding one of them would take its group mate from the host too. They are not bound; the reason says
    which GPUs to select together."""
    gpus = indexed_gpus(functions)
    by_group: dict[int, list[tuple[int, PciFunction]]] = {}
    for i, f in enumerate(gpus):
        if f.iommu_group is not None:
            by_group.setdefault(f.iommu_group, []).append((i, f))
    conflicts: dict[PciAddress, str] = {}
    for group, members in by_group.items():
        chosen = [i for i, _ in members if selection.selects(i)]
        left = [i for i, _ in members if not selection.selects(i)]
        if chosen and left:
            for i, f in members:
                if selection.selects(i):
                    conflicts[f.address] = (
                        f"GPU {i} shares IOMMU group {group} with GPU(s) {', '.join(map(str, left))}, which are not "
                        "selected: VFIO assigns whole groups, select them together or not at all"
                    )
    return conflicts


def results(
    functions: Sequence[PciFunction], selection: vfio_config.GpuSelection, *, vfio_driver: str = VFIO_DRIVER
) -> dict[int, bool]:
    """index → bound to vfio-pci, for every selected index the node has (the annotation's content)."""
    return {i: f.driver == vfio_driver for i, f in enumerate(indexed_gpus(functions)) if selection.selects(i)}
