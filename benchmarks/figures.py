"""One performance figure (P1–P12), its goal as data, and the two renderings of a list of them.

Why this module exists: every benchmark module prints its own table, and ``python -m benchmarks`` prints one
table of them all (issue 26 item 4). Both read the same `Figure` values, so the goal check lives here once:
a goal is data (`at_most(1.0, "ms")`, `ratio_at_most(1.2)`), the verdict is computed from the measured value
and the reference measured in the same run, never typed in. Pure: no measuring, no I/O.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs


class Verdict(enum.Enum):
    MET = "met"
    MISSED = "missed"
    REPORTED = "reported"
    ERROR = "error"


class Kind(enum.Enum):
    AT_MOST = "at_most"  # value ≤ limit
    AT_LEAST = "at_least"  # value ≥ limit
    RATIO_AT_MOST = "ratio_at_most"  # value / reference ≤ limit
    RATIO_AT_LEAST = "ratio_at_least"  # value / reference ≥ limit
    SPEEDUP_AT_LEAST = "speedup_at_least"  # reference / value ≥ limit (the reference is the slow way)
    ADDED_AT_MOST = "added_at_most"  # value − reference ≤ limit (in the value's unit)
    REPORTED = "reported"  # no goal: the figure is reported only


RATIOS = {Kind.RATIO_AT_MOST, Kind.RATIO_AT_LEAST, Kind.SPEEDUP_AT_LEAST}


@attrs.frozen
class Goal:
    kind: Kind
    limit: float = 0.0
    unit: str = ""
    note: str = ""
    """Said after the goal (e.g. "at 1,000 nodes"); for `reported`, why there is no goal."""

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        limit = f"{int(self.limit):,}" if self.limit == int(self.limit) else f"{self.limit:g}"
        base = {
            Kind.AT_MOST: f"≤ {limit}{unit}" if self.limit else f"= 0{unit}",
            Kind.AT_LEAST: f"≥ {limit}{unit}",
            Kind.RATIO_AT_MOST: f"≤ {limit}× reference",
            Kind.RATIO_AT_LEAST: f"≥ {limit}× reference",
            Kind.SPEEDUP_AT_LEAST: f"≥ {limit}× faster than reference",
            Kind.ADDED_AT_MOST: f"≤ {limit}{unit} added to reference",
            Kind.REPORTED: "reported",
        }[self.kind]
        return f"{base} ({self.note})" if self.note else base

    def holds(self, value: float, reference: float | None) -> bool | None:
        """Whether the goal holds; None when it cannot be checked (reported only, or no reference)."""
        if self.kind is Kind.REPORTED or math.isnan(value):
            return None
        if self.kind is Kind.AT_MOST:
            return value <= self.limit
        if self.kind is Kind.AT_LEAST:
            return value >= self.limit
        if reference is None or math.isnan(reference):
            return None
        if self.kind is Kind.ADDED_AT_MOST:
            return value - reference <= self.limit
        compared = relation(self.kind, value, reference)
        if compared is None:
            return None
        return compared <= self.limit if self.kind is Kind.RATIO_AT_MOST else compared >= self.limit


def relation(kind: Kind, value: float, reference: float) -> float | None:
    """The ratio a ratio goal compares with its limit (value / reference, or reference / value for a speed-up)."""
    top, bottom = (reference, value) if kind is Kind.SPEEDUP_AT_LEAST else (value, reference)
    return top / bottom if bottom else None


def at_most(limit: float, unit: str = "", note: str = "") -> Goal:
    return Goal(Kind.AT_MOST, limit, unit, note)


def at_least(limit: float, unit: str = "", note: str = "") -> Goal:
    return Goal(Kind.AT_LEAST, limit, unit, note)


def ratio_at_most(limit: float, note: str = "") -> Goal:
    return Goal(Kind.RATIO_AT_MOST, limit, "", note)


def ratio_at_least(limit: float, note: str = "") -> Goal:
    return Goal(Kind.RATIO_AT_LEAST, limit, "", note)


def speedup_at_least(limit: float, note: str = "") -> Goal:
    return Goal(Kind.SPEEDUP_AT_LEAST, limit, "", note)


def added_at_most(limit: float, unit: str, note: str = "") -> Goal:
    return Goal(Kind.ADDED_AT_MOST, limit, unit, note)


def reported(note: str = "") -> Goal:
    return Goal(Kind.REPORTED, note=note)


@attrs.frozen
class Figure:
    id: str
    """The P-id ("P5"); several figures may share one."""
    what: str
    goal: Goal
    value: float = math.nan
    unit: str = ""
    reference: str = ""
    """What the reference is and its value, measured in the same run ("bare grpcio echo: 0.21 ms")."""
    reference_value: float | None = None
    """The reference's number, in the value's unit, when the goal compares with it."""
    nodes: int | None = None
    """The kwok node count the figure was measured at, for the growth table."""
    error: str = ""
    """Why there is no value (the benchmark failed or lacks a prerequisite)."""

    @property
    def verdict(self) -> Verdict:
        if self.error:
            return Verdict.ERROR
        holds = self.goal.holds(self.value, self.reference_value)
        if holds is None:
            return Verdict.REPORTED
        return Verdict.MET if holds else Verdict.MISSED

    def measured(self) -> str:
        if self.error:
            return "—"
        unit = f" {self.unit}" if self.unit else ""
        text = f"{_number(self.value)}{unit}"
        ref = self.reference_value
        if ref is None or math.isnan(ref) or math.isnan(self.value):
            return text
        if self.goal.kind is Kind.ADDED_AT_MOST:
            return f"{text} ({self.value - ref:+.1f}{unit})"
        if self.goal.kind not in RATIOS and self.goal.kind is not Kind.REPORTED:
            return text
        compared = relation(self.goal.kind if self.goal.kind in RATIOS else Kind.RATIO_AT_MOST, self.value, ref)
        return text if compared is None else f"{text} ({_number(compared)}×)"

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(
            self, recurse=True, value_serializer=lambda _i, _a, v: v.value if isinstance(v, Kind) else v
        )
        data["value"] = None if math.isnan(self.value) else self.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figure:
        goal = data["goal"]
        return cls(
            id=data["id"],
            what=data["what"],
            goal=Goal(Kind(goal["kind"]), goal["limit"], goal["unit"], goal["note"]),
            value=math.nan if data["value"] is None else float(data["value"]),
            unit=data["unit"],
            reference=data["reference"],
            reference_value=data["reference_value"],
            nodes=data["nodes"],
            error=data["error"],
        )


def failed(ids: Iterable[str], what: str, error: str, nodes: int | None = None) -> list[Figure]:
    """The rows of a benchmark that did not produce its figures: one per P-id it owns, each with the error."""
    where = f", {nodes:,} nodes" if nodes is not None else ""
    message = error or "failed without a message"
    return [Figure(id=i, what=what + where, goal=reported(), nodes=nodes, error=message) for i in ids]


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == int(value) and abs(value) < 1e6:
        return f"{int(value):,}"
    magnitude = abs(value)
    digits = 3 if magnitude < 1 else 2 if magnitude < 10 else 1 if magnitude < 1000 else 0
    return f"{value:,.{digits}f}"


def sort_key(figure: Figure) -> tuple[int, str, int]:
    digits = "".join(c for c in figure.id if c.isdigit())
    return (int(digits) if digits else 99, figure.id, figure.nodes or 0)


COLUMNS = ("P", "what", "goal", "measured", "reference (same run)", "verdict")


def rows(figures: Sequence[Figure]) -> list[tuple[str, str, str, str, str, str]]:
    found = []
    for f in sorted(figures, key=sort_key):
        verdict = f.verdict.value + (f": {f.error}" if f.error else "")
        found.append((f.id, f.what, f.goal.text(), f.measured(), f.reference or "—", verdict))
    return found


GROWTH = (
    ("P1", "s", "P1 CR → pods Ready (s)"),
    ("P1/floor", "s", "P1 ratio to the floor"),
    ("P1", "%", "P1 operator CPU, share of the control plane's (%)"),
    ("P2", None, "P2 operator writes in steady state"),
    ("P3", "MiB", "P3 operator peak RSS (MiB)"),
    ("P11", None, "P11 extender filter+prioritize p99 (ms)"),
)
"""(P-id, the unit of the figure meant — P1 has two at each node count —, the row's label)."""


def growth(figures: Sequence[Figure], sizes: Sequence[int]) -> list[list[str]]:
    """One row per growth measure, one column per node count; "not run" where no figure was measured."""
    table = []
    for key, unit, label in GROWTH:
        row = [label]
        for n in sizes:
            pid = key.split("/")[0]
            match = [f for f in figures if f.id == pid and f.nodes == n and (unit is None or f.unit == unit)]
            if not match:
                row.append("not run")
            elif match[0].error:
                row.append("error")
            elif key.endswith("/floor"):
                ref = match[0].reference_value
                row.append(_number(match[0].value / ref) + "×" if ref else "n/a")
            else:
                row.append(_number(match[0].value))
        table.append(row)
    return table


def markdown(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def rich_table(title: str, header: Sequence[str], body: Sequence[Sequence[str]]) -> Any:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in header:
        table.add_column(column, overflow="fold")
    for row in body:
        table.add_row(*row)
    return table


def print_figures(figures: Sequence[Figure], title: str = "") -> None:
    """What each module's ``main`` prints after its own table: its P-figures with goal and verdict."""
    from rich.console import Console

    Console(width=160).print(rich_table(title or "P-figures", COLUMNS, rows(figures)))
