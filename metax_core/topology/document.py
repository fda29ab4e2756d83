"""The per-node topology document: which GPUs a node has and how they reach each other (C7, docs/topology.md).

Why one owner: topo-worker writes it into the node annotation `TOPOLOGY`, gpu-device reads it back for
GetPreferredAllocation and the gpu-scheduler extender reads it from its watch cache; all three call `encode` /
`decode` here. The document holds facts only (PCIe path, NUMA node, MetaXLink peers, NICs, which GPUs are
free); every judgement on them is `placement`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import FunctionKind, GpuLink, LinkKind, NetworkInterface, PciAddress, PciFunction
from metax_core.wire import meta

TOPOLOGY = meta.PREFIX + "gpu.topology"
"""Node annotation: the whole document as compact JSON (`encode`)."""
SCORES = meta.PREFIX + "gpu.topology.scores"
"""Node annotation, HAMi's: ``{"<gpu count>": score}`` of the best free set of that size (higher is better)."""
LOSSES = meta.PREFIX + "gpu.topology.losses"
"""Node annotation, HAMi's: ``{"<gpu count>": loss}`` of handing out that set (lower is better)."""
OWNED_ANNOTATIONS = (TOPOLOGY, SCORES, LOSSES)

VERSION = 1
MAX_BYTES = 64 * 1024
"""Bound on the encoded document: a quarter of the API server's 256 KiB limit for all of a node's annotations.
A 16-GPU node with 16 NICs encodes to about 6 KiB."""


@attrs.frozen
class Gpu:
    """One physical GPU: its PCI address, where it hangs in the PCIe tree, and its NUMA node."""

    address: PciAddress
    numa_node: int | None = None
    pcie_path: tuple[PciAddress, ...] = ()
    """Bridges from the root port down to the GPU (exclusive): equal prefixes mean a shared root port/switch."""
    metaxlink: tuple[PciAddress, ...] = ()
    """GPUs this one reaches over MetaXLink, sorted."""


@attrs.frozen
class Nic:
    """A network interface and the GPUs sharing its PCIe switch or root port (GPUDirect-style placement)."""

    name: str
    address: PciAddress | None = None
    numa_node: int | None = None
    pcie_path: tuple[PciAddress, ...] = ()
    gpus: tuple[PciAddress, ...] = ()


@attrs.frozen
class NodeTopology:
    """One node's GPUs (sorted by address), its NICs, and the GPUs free to hand out now."""

    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    free: tuple[PciAddress, ...] = ()

    def by_address(self) -> dict[PciAddress, Gpu]:
        return {g.address: g for g in self.gpus}


def _shares_root(a: Sequence[PciAddress], b: Sequence[PciAddress]) -> bool:
    return bool(a) and bool(b) and a[0] == b[0]


def build(
    functions: Iterable[PciFunction],
    links: Iterable[GpuLink] = (),
    interfaces: Iterable[NetworkInterface] = (),
    *,
    free: Iterable[PciAddress] | None = None,
) -> NodeTopology:
    """The document from the hardware port's records: PFs only (VFs share their PF's place), MetaXLink peers
    from the tool's MX links, NICs with the GPUs under the same root port; ``free`` defaults to every GPU."""
    pfs = sorted((f for f in functions if f.kind is FunctionKind.PF), key=lambda f: f.address)
    known = {f.address for f in pfs}
    peers: dict[PciAddress, set[PciAddress]] = {a: set() for a in known}
    for link in links:
        if link.kind is LinkKind.MX and link.a in known and link.b in known and link.a != link.b:
            peers[link.a].add(link.b)
            peers[link.b].add(link.a)
    gpus = tuple(Gpu(f.address, f.numa_node, tuple(f.pcie_path), tuple(sorted(peers[f.address]))) for f in pfs)
    nics = []
    for nic in sorted(interfaces, key=lambda n: n.name):
        if nic.pci_address is None:
            continue
        path = tuple(nic.pcie_path)
        near = tuple(g.address for g in gpus if _shares_root(g.pcie_path, path))
        nics.append(Nic(nic.name, nic.pci_address, nic.numa_node, path, near))
    chosen = known if free is None else {a for a in free if a in known}
    return NodeTopology(gpus=gpus, nics=tuple(nics), free=tuple(sorted(chosen)))


# --- the wire form ------------------------------------------------------------------------------------------


def to_json(doc: NodeTopology) -> dict[str, Any]:
    return {
        "version": VERSION,
        "gpus": [
            {"address": g.address, "numa": g.numa_node, "pcie": list(g.pcie_path), "metaxlink": list(g.metaxlink)}
            for g in doc.gpus
        ],
        "nics": [
            {"name": n.name, "address": n.address, "numa": n.numa_node, "pcie": list(n.pcie_path), "gpus": list(n.gpus)}
            for n in doc.nics
        ],
        "free": list(doc.free),
    }


def encode(doc: NodeTopology) -> str:
    """Compact, key-sorted JSON (equal documents give equal text: topo-worker compares before it writes)."""
    text = json.dumps(to_json(doc), sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_BYTES:
        raise InvalidSpec([FieldError(TOPOLOGY, f"the document is {len(text)} bytes, more than {MAX_BYTES}")])
    return text


def _str_list(value: object, path: str, errors: list[FieldError]) -> tuple[PciAddress, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(FieldError(path, "must be a list of PCI addresses (strings)"))
        return ()
    return tuple(PciAddress(v) for v in value)


def _numa(value: object, path: str, errors: list[FieldError]) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    errors.append(FieldError(path, "must be a NUMA node number (>= 0) or null"))
    return None


def decode(text: str) -> NodeTopology:
    """The document `encode` wrote; `InvalidSpec` naming every bad field otherwise."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError(TOPOLOGY, f"not JSON: {exc}")]) from exc
    if not isinstance(raw, dict):
        raise InvalidSpec([FieldError(TOPOLOGY, "must be a JSON object")])
    if raw.get("version") != VERSION:
        raise InvalidSpec([FieldError(f"{TOPOLOGY}.version", f"must be {VERSION}, got {raw.get('version')!r}")])
    errors: list[FieldError] = []
    gpus: list[Gpu] = []
    for i, g in enumerate(raw.get("gpus") or []):
        at = f"{TOPOLOGY}.gpus[{i}]"
        if not isinstance(g, dict) or not isinstance(g.get("address"), str):
            errors.append(FieldError(f"{at}.address", "must be a PCI address (string)"))
            continue
        gpus.append(
            Gpu(
                PciAddress(g["address"]),
                _numa(g.get("numa"), f"{at}.numa", errors),
                _str_list(g.get("pcie", []), f"{at}.pcie", errors),
                _str_list(g.get("metaxlink", []), f"{at}.metaxlink", errors),
            )
        )
    nics: list[Nic] = []
    for i, n in enumerate(raw.get("nics") or []):
        at = f"{TOPOLOGY}.nics[{i}]"
        if not isinstance(n, dict) or not isinstance(n.get("name"), str):
            errors.append(FieldError(f"{at}.name", "must be an interface name (string)"))
            continue
        address = n.get("address")
        if address is not None and not isinstance(address, str):
            errors.append(FieldError(f"{at}.address", "must be a PCI address (string) or null"))
            address = None
        nics.append(
            Nic(
                n["name"],
                None if address is None else PciAddress(address),
                _numa(n.get("numa"), f"{at}.numa", errors),
                _str_list(n.get("pcie", []), f"{at}.pcie", errors),
                _str_list(n.get("gpus", []), f"{at}.gpus", errors),
            )
        )
    free = _str_list(raw.get("free", []), f"{TOPOLOGY}.free", errors)
    known = {g.address for g in gpus}
    errors += [FieldError(f"{TOPOLOGY}.free", f"{a} is not one of the document's GPUs") for a in free if a not in known]
    if errors:
        raise InvalidSpec(errors)
    return NodeTopology(gpus=tuple(gpus), nics=tuple(nics), free=free)
