"""The chart's Grafana dashboard (charts/metax-operator/dashboards/metax-gpus.json), generated from the
metric owner module (`metax_core.metrics.names`), so a renamed metric or label cannot leave a panel querying
nothing. Per node and per pod: GPU utilisation, memory, power, temperature, and errors (GPUs unavailable,
the exporter's failed samplings and sample age).

Every expression is written for the default label keys (``namespace``/``pod``/``container``) and for a
scrape that keeps them (``honorLabels: true``, as the rendered ServiceMonitor says). A GPU shared by several
pods has one series per holder (`metax_core.metrics.exposition`), so per-node figures take
``max by (Hostname, pci_address)`` first. `expressions` lists every query with the dashboard variables
(``$node``) still in; tests/services/exporter/test_prometheus.py runs each against a real Prometheus.
``python -m metax_dev.chart --write`` writes it with the chart's other generated files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

from metax_core.metrics import names

TITLE = "MetaX GPUs"
UID = "metax-gpus"
FILE = "dashboards/metax-gpus.json"
"""Where the dashboard lives inside the chart directory."""

NODE = f'{{{names.HOSTNAME}=~"$node"}}'
HELD = f'{{{names.HOSTNAME}=~"$node", {names.POD}!=""}}'
PER_GPU = f"{names.HOSTNAME}, {names.PCI_ADDRESS}"
PER_POD = f"{names.NAMESPACE}, {names.POD}"


@attrs.frozen
class Panel:
    title: str
    expr: str
    legend: str
    unit: str


def _per_node(family: names.Family, how: str, selector: str = NODE) -> str:
    return f"{how} by ({names.HOSTNAME}) (max by ({PER_GPU}) ({family.name}{selector}))"


def _vram(family: names.Family, selector: str) -> str:
    return selector[:-1] + f', {names.MEMORY_TYPE}="{names.Memory.VRAM.value}"}}'


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Per node",
        (
            Panel("GPU utilisation", _per_node(names.GPU_USAGE, "avg"), "{{Hostname}}", "percent"),
            Panel(
                "GPU memory used",
                f"1024 * sum by ({names.HOSTNAME}) (max by ({PER_GPU}) "
                f"({names.MEMORY_USED.name}{_vram(names.MEMORY_USED, NODE)}))",
                "{{Hostname}}",
                "bytes",
            ),
            Panel("Board power", _per_node(names.BOARD_POWER, "sum") + " / 1000", "{{Hostname}}", "watt"),
            Panel("Hottest chip", _per_node(names.CHIP_HOTSPOT_TEMP, "max"), "{{Hostname}}", "celsius"),
            Panel(
                "GPUs unavailable",
                f"sum by ({names.HOSTNAME}) (1 - max by ({PER_GPU}) ({names.GPU_STATE.name}{NODE}))",
                "{{Hostname}}",
                "short",
            ),
            Panel(
                "Failed samplings",
                f"sum by (instance, {names.COLLECTOR}) "
                f"(increase({names.exposed_name(names.COLLECTION_ERRORS)}[$__rate_interval]))",
                "{{instance}} {{collector}}",
                "short",
            ),
            Panel(
                "Sample age",
                f"max by (instance) ({names.SAMPLE_AGE.name})",
                "{{instance}}",
                "s",
            ),
        ),
    ),
    (
        "Per pod",
        (
            Panel(
                "GPU utilisation",
                f"avg by ({PER_POD}) ({names.GPU_USAGE.name}{HELD})",
                "{{namespace}}/{{pod}}",
                "percent",
            ),
            Panel(
                "GPU memory used",
                f"1024 * sum by ({PER_POD}) ({names.MEMORY_USED.name}{_vram(names.MEMORY_USED, HELD)})",
                "{{namespace}}/{{pod}}",
                "bytes",
            ),
            Panel(
                "Board power of its GPUs",
                f"sum by ({PER_POD}) ({names.BOARD_POWER.name}{HELD}) / 1000",
                "{{namespace}}/{{pod}}",
                "watt",
            ),
            Panel(
                "Hottest chip",
                f"max by ({PER_POD}) ({names.CHIP_HOTSPOT_TEMP.name}{HELD})",
                "{{namespace}}/{{pod}}",
                "celsius",
            ),
            Panel(
                "Its GPUs unavailable",
                f"sum by ({PER_POD}) (1 - {names.GPU_STATE.name}{HELD})",
                "{{namespace}}/{{pod}}",
                "short",
            ),
        ),
    ),
)


def expressions() -> Iterator[str]:
    for _, panels in ROWS:
        for panel in panels:
            yield panel.expr


def _panel(panel: Panel, ident: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": ident,
        "type": "timeseries",
        "title": panel.title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [{"refId": "A", "expr": panel.expr, "legendFormat": panel.legend}],
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    ident, y = 1, 0
    for title, row in ROWS:
        panels.append(
            {
                "id": ident,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        ident, y = ident + 1, y + 1
        for at, panel in enumerate(row):
            panels.append(_panel(panel, ident, 8 * (at % 3), y + 8 * (at // 3)))
            ident += 1
        y += 8 * ((len(row) + 2) // 3)
    return {
        "uid": UID,
        "title": TITLE,
        "tags": ["metax", "gpu"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {
                    "name": "node",
                    "type": "query",
                    "label": "Node",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": f"label_values({names.GPU_STATE.name}, {names.HOSTNAME})",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"
