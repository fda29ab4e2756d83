"""The demo's live view: nodes × components converging, read from the cluster as ``kubectl`` would.

Why a module of its own: the table is what a person watches while the scenario runs (rich's `Live`), and the
same rows are printed as plain lines with ``--no-live``. Every cell comes from the API (pods' Ready, node
labels, allocatable), never from the stand-ins' own state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from metax_core.cluster import workloads
from metax_core.cluster.components import Component
from metax_core.node import labels
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import standins

COLUMNS = (
    (Component.GPU_LABEL, "gpu-label"),
    (Component.RUNTIME, "runtime"),
    (Component.DRIVER, "driver"),
    (Component.MACA, "maca"),
    (Component.GPU_DEVICE, "gpu-device"),
    (Component.VFIO_MANAGER, "vfio"),
)


def cells(f: demo_fleet.Fleet) -> dict[str, dict[str, str]]:
    """node → column → what the cluster says (``ready``, ``starting``, ``-``), plus driver and allocatable."""
    pods: dict[tuple[str, str], Mapping[str, Any]] = {}
    for p in f.pods():
        component = (p["metadata"].get("labels") or {}).get(workloads.COMPONENT_LABEL, "")
        pods[(p["spec"].get("nodeName", ""), component)] = p
    rows: dict[str, dict[str, str]] = {}
    for n in f.nodes:
        node = f.node_object(n.name)
        row = {}
        for component, title in COLUMNS:
            pod = pods.get((n.name, component.value))
            row[title] = "-" if pod is None else ("ready" if standins.pod_ready(pod) else "starting")
        node_labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        row["driver"] = node_labels.get(labels.DRIVER_VERSION, "-")
        row["gpu"] = allocatable.get("metax-tech.com/gpu", "-")
        row["vfio-gpu"] = allocatable.get("metax-tech.com/vfio-gpu", "-")
        rows[n.name] = row
    return rows


_STYLE = {"ready": "[green]ready[/green]", "starting": "[yellow]starting[/yellow]", "-": "[dim]-[/dim]"}


def table(f: demo_fleet.Fleet, title: str = "") -> Table:
    t = Table("node", "GPUs", *(title for _, title in COLUMNS), "driver", "gpu", "vfio-gpu", title=title)
    found = cells(f)
    for n in f.nodes:
        row = found[n.name]
        t.add_row(
            n.name,
            str(n.gpus),
            *(_STYLE.get(row[title], row[title]) for _, title in COLUMNS),
            row["driver"],
            row["gpu"],
            row["vfio-gpu"],
        )
    return t


def lines(f: demo_fleet.Fleet) -> list[str]:
    """The same as plain text, one line per node."""
    return [f"{name}: " + " ".join(f"{k}={v}" for k, v in row.items()) for name, row in cells(f).items()]
