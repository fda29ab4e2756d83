"""The demo's live view: nodes × components converging, read from the cluster as ``kubectl`` would.

Why a module of its own: the table is what a person watches while the scenario runs (rich's `Live`), and the
same rows are printed as plain lines with ``--no-live``. Every cell comes from the API (pods' Ready, node
labels, allocatable), never from the stand-ins' own state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from metax_core import components
from metax_core.cluster import workloads
from metax_core.components import Component
from metax_core.node import devices, labels
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import standins

COLUMNS = (
    (components.GPU_DISCOVERY.name, "discover"),
    *(
        (next(w.name for w in components.BY_COMPONENT[c].workloads if w.publishes_readiness), title)
        for c, title in (
            (Component.GPU_LABEL, "label"),
            (Component.RUNTIME, "runtime"),
            (Component.DRIVER, "driver"),
            (Component.MACA, "maca"),
            (Component.GPU_DEVICE, "device"),
            (Component.VFIO_MANAGER, "vfio"),
        )
    ),
)
"""The node agents' columns: (workload, column title); each cell is that workload's pod on the node."""


def cells(f: demo_fleet.Fleet) -> dict[str, dict[str, str]]:
    """node → column → what the cluster says (``ready``, ``starting``, ``-`` for no pod), plus the driver
    version label and the allocatable GPUs and vfio GPUs."""
    pods: dict[tuple[str, str], Mapping[str, Any]] = {}
    for p in f.pods():
        workload = (p["metadata"].get("labels") or {}).get(workloads.APP_LABEL, "")
        pods[(p["spec"].get("nodeName", ""), workload)] = p
    rows: dict[str, dict[str, str]] = {}
    for n in [*f.nodes, *f.cpu_nodes]:
        node = f.node_object(n.name)
        row = {}
        for workload, title in COLUMNS:
            pod = pods.get((n.name, workload))
            row[title] = "-" if pod is None else ("ready" if standins.pod_ready(pod) else "starting")
        node_labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        row["version"] = node_labels.get(labels.DRIVER_VERSION, "-")
        row["gpu"] = allocatable.get(devices.Resource.GPU.value, "-")
        row["vfio-gpu"] = allocatable.get(devices.Resource.VFIO_GPU.value, "-")
        rows[n.name] = row
    return rows


_SHOWN = {"ready": Text("✓", style="green"), "starting": Text("…", style="yellow"), "-": Text("·", style="dim")}


def table(f: demo_fleet.Fleet, title: str = "") -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for header in ("node", "GPUs", *(title for _, title in COLUMNS), "version", "gpu", "vfio-gpu"):
        t.add_column(header, no_wrap=True)
    found = cells(f)
    for n in [*f.nodes, *f.cpu_nodes]:
        row = found[n.name]
        t.add_row(
            n.name,
            str(n.gpus),
            *(_SHOWN[row[title]] for _, title in COLUMNS),
            row["version"],
            row["gpu"],
            row["vfio-gpu"],
        )
    return t


def lines(f: demo_fleet.Fleet) -> list[str]:
    """The same as plain text, one line per node."""
    return [f"{name}: " + " ".join(f"{k}={v}" for k, v in row.items()) for name, row in cells(f).items()]
