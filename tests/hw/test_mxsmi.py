"""mx-smi text parsers: the two table layouts seen in the wild, the versions and topology outputs, and
robustness — any text either parses into whole GPUs or raises HardwareError, never anything else.

Aspects covered: header versions; layout A (GPU/NAME, Temp/Pwr in the first column) and layout B
(Board/Name, GPU/Persist-M, Pwr in the first column, Temp/Perf in the second); N/A values; process rows;
no-device output; inconsistent counts and duplicate Bus-ids refused; ``--show-version`` sections;
``topo -m`` with NIC columns and unknown codes; generated tables round-trip; arbitrary text never crashes.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core import errors
from metax_core.inventory import LinkKind, PciAddress
from metax_hw import mxsmi

LAYOUT_A = """\
mx-smi  version: 2.2.4

=================== MetaX System Management Interface Log ===================
Timestamp                                         : Mon Mar  2 10:00:00 2026

Attached GPUs                                     : 2
+---------------------------------------------------------------------------------+
| MX-SMI 2.2.4                        Kernel Mode Driver Version: 2.15.9          |
| MACA Version: 2.32.0.6              BIOS Version: 1.25.1.0                      |
|------------------------------------+---------------------+----------------------+
| GPU         NAME                   | Bus-id              | GPU-Util             |
| Temp        Pwr:Usage/Cap          | Memory-Usage        | GPU-State            |
|====================================+=====================+======================|
| 0           MetaX C550             | 0000:1a:00.0        | 3%                   |
| 41C         61W / 450W             | 1024/65536 MiB      | Available            |
+------------------------------------+---------------------+----------------------+
| 1           MetaX C550             | 0000:2B:00.0        | N/A                  |
| N/A         N/A                    | N/A                 | Unavailable          |
+------------------------------------+---------------------+----------------------+

+---------------------------------------------------------------------------------+
| Process:                                                                        |
|  GPU                    PID         Process Name                 GPU Memory     |
|                                                                  Usage(MiB)     |
|=================================================================================|
|  0                      31337       python3                      2048           |
+---------------------------------------------------------------------------------+

End of Log
"""

LAYOUT_B = """\
=================== MetaX System Management Interface Log ===================
Attached GPUs                                     : 2
+---------------------------------------------------------------------------------+
| MX-SMI 2.2.9                       Kernel Mode Driver Version: 3.4.4            |
| MACA Version: 3.3.0.15             BIOS Version: 1.30.0.0                       |
|------------------+-----------------+---------------------+----------------------|
| Board       Name | GPU   Persist-M | Bus-id              | GPU-Util      sGPU-M |
| Pwr:Usage/Cap    | Temp       Perf | Memory-Usage        | GPU-State            |
|==================+=================+=====================+======================|
| 0     MetaX C500 | 4           Off | 0000:0e:00.0        | 12%         Disabled |
| 58W / 350W       | 36C          P0 | 900/65536 MiB       | Available            |
+------------------+-----------------+---------------------+----------------------+
| 1     MetaX C500 | 5           Off | 0000:0f:00.0        | 0%          Disabled |
| 57.5W / 350W     | 35.5C        P0 | 1.5/64 GiB          | Available            |
+------------------+-----------------+---------------------+----------------------+
"""


def test_layout_a() -> None:
    summary = mxsmi.parse_summary(LAYOUT_A)
    assert summary.header == mxsmi.SmiHeader("2.2.4", "2.15.9", "2.32.0.6", "1.25.1.0", 2)
    first, second = summary.gpus
    assert first == mxsmi.SmiGpu(
        0, PciAddress("0000:1a:00.0"), "MetaX C550", 3.0, 41.0, 61.0, 450.0, 1024 * 2**20, 65536 * 2**20, "Available"
    )
    assert (second.index, second.address, second.state) == (1, "0000:2b:00.0", "Unavailable")
    assert second.utilization_percent is second.temperature_celsius is second.memory_total_bytes is None
    assert summary.processes == (mxsmi.SmiProcess(0, 31337, "python3", 2048 * 2**20),)


def test_layout_b_takes_the_gpu_column_for_the_index() -> None:
    summary = mxsmi.parse_summary(LAYOUT_B)
    assert summary.header.driver_version == "3.4.4"
    assert [(g.index, g.name, g.utilization_percent, g.temperature_celsius) for g in summary.gpus] == [
        (4, "MetaX C500", 12.0, 36.0),
        (5, "MetaX C500", 0.0, 35.5),
    ]
    assert summary.gpus[1].power_watts == 57.5 and summary.gpus[1].memory_used_bytes == int(1.5 * 2**30)
    assert summary.processes == ()


def test_no_devices_is_an_empty_answer() -> None:
    assert mxsmi.parse_summary("mx-smi  version: 2.2.9\n\nAttached GPUs : 0\nEnd of Log\n").gpus == ()
    assert mxsmi.parse_summary("No devices were found\n").gpus == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no GPU table"),
        ("Segmentation fault (core dumped)\n", "no GPU table"),
        (
            LAYOUT_A.replace("Attached GPUs                                     : 2", "Attached GPUs : 3"),
            "says 3 GPUs attached but its table lists 2",
        ),
        (LAYOUT_A.replace("0000:2B:00.0", "0000:1a:00.0"), "lists a Bus-id twice"),
        (LAYOUT_A.replace("0000:2B:00.0", "lost"), "a GPU entry without a Bus-id"),
    ],
)
def test_unusable_output_is_a_hardware_error(text: str, message: str) -> None:
    with pytest.raises(errors.HardwareError, match=message):
        mxsmi.parse_summary(text)


def test_versions_by_section() -> None:
    text = (
        "Attached GPUs : 2\n\nGPU#0  0000:0e:00.0  MetaX C500\n    BIOS Version      : 1.13.0.0\n"
        "GPU#1  0000:0F:00.0  MetaX C500\n    Kernel Mode Driver Version : 2.18.0\n"
        "    BIOS Version      : 1.12.2.0\nEnd of Log\n"
    )
    assert mxsmi.parse_versions(text) == {"0000:0e:00.0": "1.13.0.0", "0000:0f:00.0": "1.12.2.0"}
    assert mxsmi.parse_versions("BIOS Version: 1.0.0.0 with no GPU section\n") == {}


def test_topology_matrix() -> None:
    text = """Device link type matrix
        GPU0    GPU1    GPU2    NIC0    Node Affinity  CPU Affinity
GPU0    X       MX      SYS     PIX     0              0-31
GPU1    MX      X       WEIRD   PIX     0              0-31
GPU2    SYS     NODE    X       SYS     1              32-63
NIC0    PIX     PIX     SYS     X       0              0-31

Legend:
  X    = Self
"""
    topology = mxsmi.parse_topology(text)
    assert topology.labels == ("GPU0", "GPU1", "GPU2", "NIC0")
    assert topology.links[("GPU0", "GPU1")] is LinkKind.MX
    assert topology.links[("GPU1", "GPU2")] is LinkKind.NA
    assert topology.links[("GPU2", "NIC0")] is LinkKind.SYS
    assert topology.numa_affinity == {"GPU0": 0, "GPU1": 0, "GPU2": 1, "NIC0": 0}
    with pytest.raises(errors.HardwareError, match="no link matrix"):
        mxsmi.parse_topology("GPU0 X\n")
    with pytest.raises(errors.HardwareError, match="row GPU1 has 1 cells, expected 2"):
        mxsmi.parse_topology("     GPU0 GPU1\nGPU0 X MX\nGPU1 MX\n")


gpu_values = st.tuples(
    st.integers(0, 100),
    st.integers(0, 120),
    st.integers(0, 999),
    st.integers(1, 999),
    st.integers(0, 2**16),
    st.integers(1, 2**17),
    st.sampled_from(["Available", "Unavailable", "In Use"]),
)


def _render(rows: list[tuple[int, int, int, int, int, int, str]]) -> str:
    lines = [
        f"Attached GPUs : {len(rows)}",
        "| GPU   NAME | Bus-id | GPU-Util |",
        "| Temp Pwr | Memory | State |",
        "|====|====|====|",
    ]
    for i, (util, temp, power, cap, used, total, state) in enumerate(rows):
        lines += [
            f"| {i}  MetaX C500 | 0000:{i:02x}:00.0 | {util}% |",
            f"| {temp}C  {power}W / {cap}W | {used}/{total} MiB | {state} |",
            "+----+----+----+",
        ]
    return "\n".join(lines) + "\n"


@given(st.lists(gpu_values, min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_generated_tables_round_trip(rows: list[tuple[int, int, int, int, int, int, str]]) -> None:
    gpus = mxsmi.parse_summary(_render(rows)).gpus
    assert [
        (
            g.index,
            g.utilization_percent,
            g.temperature_celsius,
            g.power_watts,
            g.power_cap_watts,
            g.memory_used_bytes,
            g.memory_total_bytes,
            g.state,
        )
        for g in gpus
    ] == [(i, u, t, p, c, used * 2**20, total * 2**20, s) for i, (u, t, p, c, used, total, s) in enumerate(rows)]


table_like = st.text(alphabet="|+=-: %C/W0123456789abcdefGPU Bus-idMiBAvailable\n.", max_size=400)


@given(st.one_of(st.text(max_size=400), table_like))
@settings(max_examples=300, deadline=None)
def test_any_text_parses_or_is_a_hardware_error(text: str) -> None:
    for parse in (mxsmi.parse_summary, mxsmi.parse_topology, mxsmi.parse_versions):
        with contextlib.suppress(errors.HardwareError):
            parse(text)


@given(st.text(max_size=200))
@settings(max_examples=100, deadline=None)
def test_garbage_inside_a_real_table_is_refused_or_ignored(junk: str) -> None:
    text = LAYOUT_A.replace("| 41C         61W / 450W             |", f"| {junk} |")
    try:
        summary = mxsmi.parse_summary(text)
    except errors.HardwareError:
        return
    assert all(g.address for g in summary.gpus)
