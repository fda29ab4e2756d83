"""Parsers for mx-smi's text output: the summary table, ``--show-version`` and ``topo -m``.

Why a separate, pure module: mx-smi has no documented machine format we can rely on across versions, and
two different table layouts are known in the wild (docs/hardware.md shows both). So the parsers look for
*shapes* — a PCI address, ``NN%``, ``NNC``, ``NNW / NNW``, ``used/total MiB`` inside one GPU's rows — rather
than fixed columns, and they are unit- and property-tested on their own. Output they cannot make sense of
raises `HardwareError`; it never crashes and never yields a half-read GPU.
"""

from __future__ import annotations

import re

import attrs

from metax_core import errors
from metax_core.inventory import LinkKind, PciAddress

_OP = "read mx-smi output"

_ADDRESS = re.compile(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
_UTIL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*%")
_TEMP = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*C(?![A-Za-z0-9])")
_POWER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*W\s*/\s*(\d+(?:\.\d+)?)\s*W(?![A-Za-z0-9])")
_MEMORY = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:([KMG]i?B)\s*)?/\s*(\d+(?:\.\d+)?)\s*([KMG]i?B)(?![A-Za-z0-9])")
_FIRST_INT = re.compile(r"^\s*(\d+)\b")
_HEADER_FIELDS = {
    "smi_version": re.compile(r"(?:MX-SMI\s+|mx-smi\s+version:\s*)(\d[\w.\-]*)", re.IGNORECASE),
    "driver_version": re.compile(r"Kernel Mode Driver Version\s*:\s*(\d[\w.\-]*)"),
    "maca_version": re.compile(r"MACA Version\s*:\s*(\d[\w.\-]*)"),
    "bios_version": re.compile(r"BIOS Version\s*:\s*(\d[\w.\-]*)"),
}
_ATTACHED = re.compile(r"Attached GPUs\s*:\s*(\d+)")
_NO_DEVICES = re.compile(r"no (?:devices?|gpus?) (?:were |was )?found", re.IGNORECASE)
_PROCESS_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(.*?)\s+(\d+(?:\.\d+)?|N/A)\s*\|$")
_UNITS = {"KB": 1024, "KIB": 1024, "MB": 1024**2, "MIB": 1024**2, "GB": 1024**3, "GIB": 1024**3}
_MAX_SHOWN = 160


def _shown(text: str) -> str:
    text = text.strip()
    return repr(text[:_MAX_SHOWN] + ("..." if len(text) > _MAX_SHOWN else "")) if text else "(empty)"


@attrs.frozen
class SmiHeader:
    smi_version: str | None = None
    driver_version: str | None = None
    maca_version: str | None = None
    bios_version: str | None = None
    attached: int | None = None


@attrs.frozen
class SmiGpu:
    """One GPU's rows of the summary table. None means the tool printed no (or ``N/A``) value."""

    index: int
    address: PciAddress
    name: str = ""
    utilization_percent: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_cap_watts: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    state: str = ""


@attrs.frozen
class SmiProcess:
    gpu_index: int
    pid: int
    name: str
    memory_used_bytes: int | None


@attrs.frozen
class SmiSummary:
    header: SmiHeader
    gpus: tuple[SmiGpu, ...]
    processes: tuple[SmiProcess, ...] = ()


def parse_header(text: str) -> SmiHeader:
    values: dict[str, str | None] = {}
    for field, pattern in _HEADER_FIELDS.items():
        match = pattern.search(text)
        values[field] = match.group(1) if match else None
    attached = _ATTACHED.search(text)
    return SmiHeader(
        smi_version=values["smi_version"],
        driver_version=values["driver_version"],
        maca_version=values["maca_version"],
        bios_version=values["bios_version"],
        attached=int(attached.group(1)) if attached else None,
    )


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _is_rule(line: str) -> bool:
    """``+----+----+`` or ``|----+----|`` (but not ``|====|``)."""
    s = line.strip()
    return len(s) > 2 and s[0] in "+|" and set(s) <= set("+-|") and "-" in s


def _is_double_rule(line: str) -> bool:
    s = line.strip()
    return len(s) > 2 and s[0] in "+|" and set(s) <= set("+=|") and "=" in s


def _bytes(amount: str, unit: str | None) -> int:
    return int(float(amount) * _UNITS.get((unit or "MiB").upper(), 1024**2))


def _gpu_from_rows(rows: list[str], header_rows: list[str], ordinal: int) -> SmiGpu:
    text = " | ".join(rows)
    address = _ADDRESS.search(text)
    if address is None:
        raise errors.HardwareError(_OP, None, f"a GPU entry without a Bus-id: {_shown(text)}")
    first = _cells(rows[0])
    header_cells = _cells(header_rows[0]) if header_rows else []
    index_cell = next((i for i, c in enumerate(header_cells) if c.split()[:1] == ["GPU"]), 0)
    index_match = _FIRST_INT.match(first[index_cell]) if index_cell < len(first) else None
    name = re.sub(r"^\s*\d+\s+", "", first[0]).strip() if first else ""
    if _ADDRESS.search(name):
        name = ""
    util = _UTIL.search(text)
    temp = _TEMP.search(text)
    power = _POWER.search(text)
    memory = _MEMORY.search(text)
    last_cells = _cells(rows[-1])
    state = last_cells[-1] if last_cells else ""
    if _UTIL.fullmatch(state) or _ADDRESS.search(state):
        state = ""
    return SmiGpu(
        index=int(index_match.group(1)) if index_match else ordinal,
        address=PciAddress(address.group(1).lower()),
        name=name,
        utilization_percent=float(util.group(1)) if util else None,
        temperature_celsius=float(temp.group(1)) if temp else None,
        power_watts=float(power.group(1)) if power else None,
        power_cap_watts=float(power.group(2)) if power else None,
        memory_used_bytes=_bytes(memory.group(1), memory.group(2) or memory.group(4)) if memory else None,
        memory_total_bytes=_bytes(memory.group(3), memory.group(4)) if memory else None,
        state=state,
    )


def _gpu_table(lines: list[str]) -> list[SmiGpu] | None:
    """The GPU table: header rows above the first ``|====|`` rule mentioning Bus-id, then entries split by rules."""
    for at, line in enumerate(lines):
        if not _is_double_rule(line):
            continue
        header_rows: list[str] = []
        up = at - 1
        while up >= 0 and lines[up].strip().startswith("|") and not _is_rule(lines[up]):
            header_rows.insert(0, lines[up])
            up -= 1
        if not any("bus-id" in h.lower() for h in header_rows):
            continue
        gpus: list[SmiGpu] = []
        entry: list[str] = []
        for row in lines[at + 1 :]:
            stripped = row.strip()
            if _is_rule(row) or not stripped.startswith("|"):
                if entry:
                    gpus.append(_gpu_from_rows(entry, header_rows, len(gpus)))
                    entry = []
                if not stripped.startswith(("|", "+")):
                    break
                continue
            if not entry and "process" in stripped.lower():
                break
            entry.append(row)
        if entry:
            gpus.append(_gpu_from_rows(entry, header_rows, len(gpus)))
        return gpus
    return None


def _process_table(lines: list[str]) -> list[SmiProcess]:
    processes: list[SmiProcess] = []
    in_table = False
    seen_header = False
    for line in lines:
        if "Process" in line and line.strip().startswith("|") and not in_table:
            seen_header = True
            continue
        if seen_header and _is_double_rule(line):
            in_table = True
            continue
        if in_table:
            if _is_rule(line) or not line.strip().startswith("|"):
                break
            match = _PROCESS_ROW.match(line.strip())
            if match:
                memory = match.group(4)
                processes.append(
                    SmiProcess(
                        gpu_index=int(match.group(1)),
                        pid=int(match.group(2)),
                        name=match.group(3).strip(),
                        memory_used_bytes=None if memory == "N/A" else _bytes(memory, "MiB"),
                    )
                )
    return processes


def parse_summary(text: str) -> SmiSummary:
    """Plain ``mx-smi``: header versions, one `SmiGpu` per table entry, the process table."""
    header = parse_header(text)
    lines = text.splitlines()
    gpus = _gpu_table(lines)
    if gpus is None:
        if header.attached == 0 or _NO_DEVICES.search(text):
            return SmiSummary(header=header, gpus=())
        raise errors.HardwareError(_OP, None, f"no GPU table in mx-smi output: {_shown(text)}")
    if header.attached is not None and header.attached != len(gpus):
        raise errors.HardwareError(
            _OP, None, f"mx-smi says {header.attached} GPUs attached but its table lists {len(gpus)}"
        )
    addresses = [g.address for g in gpus]
    if len(set(addresses)) != len(addresses):
        raise errors.HardwareError(_OP, None, f"mx-smi lists a Bus-id twice: {', '.join(addresses)}")
    return SmiSummary(header=header, gpus=tuple(gpus), processes=tuple(_process_table(lines)))


def parse_versions(text: str) -> dict[PciAddress, str]:
    """``mx-smi --show-version``: the BIOS version of each GPU section (a line naming a Bus-id opens one)."""
    versions: dict[PciAddress, str] = {}
    current: PciAddress | None = None
    bios = _HEADER_FIELDS["bios_version"]
    for line in text.splitlines():
        address = _ADDRESS.search(line)
        if address is not None:
            current = PciAddress(address.group(1).lower())
            continue
        match = bios.search(line)
        if match is not None and current is not None:
            versions[current] = match.group(1)
    return versions


@attrs.frozen
class SmiTopology:
    labels: tuple[str, ...]
    """Column labels in order: ``GPU0``, ``GPU1``, ..., ``NIC0``..."""
    links: dict[tuple[str, str], LinkKind]
    """(row label, column label) -> link kind, for every cell but the diagonal."""
    numa_affinity: dict[str, int | None]


def _link_kind(code: str) -> LinkKind:
    try:
        return LinkKind(code.upper())
    except ValueError:
        return LinkKind.NA


def parse_topology(text: str) -> SmiTopology:
    """``mx-smi topo -m``: the device link type matrix."""
    lines = text.splitlines()
    labels: list[str] = []
    start = None
    for at, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) > 1 and tokens[0] == "GPU0" and tokens[1] != "X":
            labels = [t for t in tokens if re.fullmatch(r"(?:GPU|NIC)\d+", t)]
            start = at + 1
            break
    if start is None or not labels:
        raise errors.HardwareError(_OP, None, f"no link matrix in mx-smi topo output: {_shown(text)}")
    links: dict[tuple[str, str], LinkKind] = {}
    affinity: dict[str, int | None] = {}
    for line in lines[start:]:
        tokens = line.split()
        if not tokens or not re.fullmatch(r"(?:GPU|NIC)\d+", tokens[0]):
            break
        row = tokens[0]
        cells = tokens[1 : 1 + len(labels)]
        if len(cells) != len(labels):
            raise errors.HardwareError(_OP, None, f"topology row {row} has {len(cells)} cells, expected {len(labels)}")
        for column, code in zip(labels, cells, strict=False):
            if column != row:
                links[(row, column)] = _link_kind(code)
        rest = tokens[1 + len(labels) :]
        affinity[row] = int(rest[0]) if rest and rest[0].isdigit() else None
    if not links and len(labels) > 1:
        raise errors.HardwareError(_OP, None, "the link matrix has no rows")
    return SmiTopology(labels=tuple(labels), links=links, numa_affinity=affinity)
