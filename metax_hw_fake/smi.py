"""What the fake mx-smi prints, rendered from the fake host's tree and state.

Why: the real adapter must parse mx-smi's *text*, so the fake must print text in the layout docs/hardware.md
records (the "GPU NAME | Bus-id | GPU-Util / Temp Pwr:Usage/Cap | Memory-Usage | GPU-State" table, the
process table, ``End of Log``), listing exactly the functions bound to the driver that still answer on the
bus. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metax_hw_fake import layout, pcidev

State = dict[str, Any]
RULE = "+" + "-" * 36 + "+" + "-" * 21 + "+" + "-" * 22 + "+"
BANNER = "=================== MetaX System Management Interface Log ==================="


class Gpu:
    """One listed function with the numbers the fake reports for it."""

    def __init__(self, index: int, address: str, record: dict[str, Any], silent: bool = False) -> None:
        self.index = index
        self.address = address
        self.record = record
        self.silent = silent
        """Stopped answering (`FakeHost.stop_answering`): mx-smi leaves it out, libmxsml calls on it fail."""


def listed(root: Path, st: State, *, silent: bool = False) -> list[Gpu]:
    """Functions bound to the native driver and not fallen off the bus, in PCI order (mx-smi's index);
    ``silent``: also those that stopped answering (flagged), as the fake libmxsml enumerates them."""
    found: list[Gpu] = []
    native = st["native_driver"]
    for entry in sorted(layout.devices_dir(root).iterdir()):
        addr = entry.name
        if pcidev.driver_of(root, addr) != native or addr in st["faults"]["fallen"]:
            continue
        quiet = addr in st["faults"].get("silent", ())
        if quiet and not silent:
            continue
        record = st["gpus"].get(addr)
        if record is None:
            physfn = layout.link_name(entry / "physfn")
            parent = st["gpus"].get(physfn or "")
            if parent is None:
                continue
            numvfs = max(1, int(layout.get(layout.devices_dir(root) / str(physfn) / "sriov_numvfs") or "1"))
            record = dict(parent, util=0, mem_used_mib=0, mem_total_mib=int(parent["mem_total_mib"]) // numvfs, power=0)
            record.update(st.get("vf_values", {}).get(addr, {}))
        found.append(Gpu(len(found), addr, record, quiet))
    return found


def _header(st: State, count: int) -> list[str]:
    return [
        f"mx-smi  version: {st['smi_version']}",
        "",
        BANNER,
        "Timestamp                                         : Thu Jan  1 00:00:00 2026",
        "",
        f"Attached GPUs                                     : {count}",
    ]


def _row(*cells: tuple[str, int]) -> str:
    return "|" + "|".join(f" {text:<{width - 1}}" for text, width in cells) + "|"


def summary(root: Path, st: State, driver_version: str | None) -> str:
    gpus = listed(root, st)
    bios = st["gpus"][gpus[0].address]["vbios"] if gpus and gpus[0].address in st["gpus"] else "N/A"
    lines = _header(st, len(gpus))
    lines += [
        "+" + "-" * 81 + "+",
        _row((f"MX-SMI {st['smi_version']:<30}Kernel Mode Driver Version: {driver_version or 'N/A'}", 81)),
        _row((f"MACA Version: {st['maca_version']:<21}BIOS Version: {bios}", 81)),
        "|" + "-" * 36 + "+" + "-" * 21 + "+" + "-" * 22 + "+",
        _row(("GPU         NAME", 36), ("Bus-id", 21), ("GPU-Util", 22)),
        _row(("Temp        Pwr:Usage/Cap", 36), ("Memory-Usage", 21), ("GPU-State", 22)),
        "|" + "=" * 36 + "+" + "=" * 21 + "+" + "=" * 22 + "|",
    ]
    for gpu in gpus:
        r = gpu.record
        lines.append(_row((f"{gpu.index:<12}MetaX {r['model']}", 36), (gpu.address, 21), (f"{r['util']}%", 22)))
        lines.append(
            _row(
                (f"{r['temp']}C{'':<9}{r['power']}W / {r['power_cap']}W", 36),
                (f"{r['mem_used_mib']}/{r['mem_total_mib']} MiB", 21),
                (str(r["state"]), 22),
            )
        )
        lines.append(RULE)
    by_address = {g.address: g.index for g in gpus}
    lines += [
        "",
        "+" + "-" * 81 + "+",
        _row(("Process:", 81)),
        _row((" GPU                    PID         Process Name                 GPU Memory", 81)),
        _row(("                                                                 Usage(MiB)", 81)),
        "|" + "=" * 81 + "|",
    ]
    processes = [p for p in st["processes"] if p["address"] in by_address]
    if not processes:
        lines.append(_row((" no process found", 81)))
    for p in processes:
        lines.append(_row((f" {by_address[p['address']]:<23}{p['pid']:<12}{p['name']:<29}{p['mem_mib']}", 81)))
    lines += ["+" + "-" * 81 + "+", "", "End of Log"]
    return "\n".join(lines) + "\n"


def versions(root: Path, st: State, driver_version: str | None) -> str:
    gpus = listed(root, st)
    lines = _header(st, len(gpus))
    for gpu in gpus:
        lines += [
            "",
            f"GPU#{gpu.index}  {gpu.address}  MetaX {gpu.record['model']}",
            f"    MXSMI Version                                 : {st['smi_version']}",
            f"    Kernel Mode Driver Version                    : {driver_version or 'N/A'}",
            f"    BIOS Version                                  : {gpu.record['vbios']}",
        ]
    return "\n".join([*lines, "", "End of Log"]) + "\n"


def _link(root: Path, st: State, a: str, b: str) -> str:
    pair = "|".join(sorted((a, b)))
    if pair in st["mx_links"]:
        return "MX"
    path_a = layout.real_dir(root, layout.devices_dir(root) / a).parent
    path_b = layout.real_dir(root, layout.devices_dir(root) / b).parent
    if path_a.parent == path_b.parent:
        return "PIX"
    numa_a = layout.get(layout.devices_dir(root) / a / "numa_node")
    numa_b = layout.get(layout.devices_dir(root) / b / "numa_node")
    return "NODE" if numa_a == numa_b else "SYS"


def topology(root: Path, st: State) -> str:
    gpus = listed(root, st)
    labels = [f"GPU{g.index}" for g in gpus]
    lines = [
        *_header(st, len(gpus)),
        "Device link type matrix",
        "        " + "".join(f"{label:<8}" for label in labels) + "Node Affinity",
    ]
    for gpu, label in zip(gpus, labels, strict=False):
        cells = ["X" if other is gpu else _link(root, st, gpu.address, other.address) for other in gpus]
        numa = layout.get(layout.devices_dir(root) / gpu.address / "numa_node") or "-1"
        lines.append(f"{label:<8}" + "".join(f"{c:<8}" for c in cells) + (numa if numa != "-1" else "N/A"))
    lines += ["", "Legend:", "  X    = Self", "  MX   = Connection traversing MetaXLink", "", "End of Log"]
    return "\n".join(lines) + "\n"


def gpu_list(root: Path, st: State) -> str:
    return "".join(
        f"GPU#{g.index}  MetaX {g.record['model']}  {g.address}  {g.record['state']} (UUID: GPU-{g.address})\n"
        for g in listed(root, st)
    )


def garbage() -> str:
    """What a confused tool might print: table-ish fragments, nothing a parser may trust."""
    return (
        "MX-SMI ?? Kernel Mode Driver Version: \x1b[31m\n|=====|\n| 0 | ##### | 77% | 3?C |\n"
        "mxsml: ioctl 0xc0186d01 failed\n\x00\xff garbage\n"
    )
