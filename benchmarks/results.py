"""The store of benchmark runs, ``benchmarks/results.json``, and ``benchmarks/RESULTS.md`` rendered from it.

Why this module exists: ``python -m benchmarks --write`` of a subset (``--only P1,P2,P3 --nodes 1000,5000``)
must not throw away every other figure. Each run is kept with its machine, command, notes and outcomes; a new
run replaces, in the older runs, only the outcomes with the same key (module, node count of a per-size run),
and a run left with none is dropped. RESULTS.md is then rendered from the whole store, each figure with the
run it came from; its verdict is computed from the stored goal and value, as for a live run. Pure apart from
`load` and `save`; runs and outcomes are the JSON dicts stored.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Sequence
from typing import Any

from benchmarks import figures as fig

Run = dict[str, Any]
"""{"number", "machine" (the facts `machine()` gives), "load" ({"start", "end"}), "command", "notes", "outcomes"}"""
Outcome = dict[str, Any]
"""{"module", "nodes" (of a per-size run, else None), "ids", "seconds", "error", "figures" (`Figure.to_json`)}"""
Key = tuple[str, int | None]

MACHINE = ("CPU", "cores", "RAM", "kernel", "Python")
"""The facts of the newest run shown under Machine; date, load and commit are per run, under Runs."""


def load(path: pathlib.Path) -> list[Run]:
    """The stored runs; a missing file is an empty store."""
    return json.loads(path.read_text()) if path.is_file() else []


def dumps(runs: Sequence[Run]) -> str:
    return json.dumps(list(runs), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def save(path: pathlib.Path, runs: Sequence[Run]) -> None:
    path.write_text(dumps(runs))


def key(outcome: Outcome) -> Key:
    return (outcome["module"], outcome["nodes"])


def loads(facts: dict[str, str]) -> dict[str, float | None]:
    """The load average at the start and end as numbers, from `machine()`'s "3.0 at the start, 8.9 at the end"."""
    text = facts.get("load average (1 min)", "")
    start = re.search(r"([\d.]+) at the start", text)
    end = re.search(r"([\d.]+) at the end", text)
    return {"start": float(start.group(1)) if start else None, "end": float(end.group(1)) if end else None}


def new_run(facts: dict[str, str], command: str, notes: Sequence[str], outcomes: Sequence[Outcome]) -> Run:
    """A run to `merge`; its number is given when it is merged."""
    return {
        "number": 0,
        "machine": dict(facts),
        "load": loads(facts),
        "command": command,
        "notes": list(notes),
        "outcomes": list(outcomes),
    }


def merge(runs: Sequence[Run], run: Run) -> list[Run]:
    """The older runs without the outcomes `run` measures again (a run left with none is dropped), then `run`,
    numbered one above the highest number stored."""
    fresh = {key(o) for o in run["outcomes"]}
    kept = []
    for older in runs:
        outcomes = [o for o in older["outcomes"] if key(o) not in fresh]
        if outcomes:
            kept.append({**older, "outcomes": outcomes})
    number = max((r["number"] for r in runs), default=0) + 1
    return [*kept, {**run, "number": number}]


def ordered(runs: Sequence[Run], order: Sequence[Key]) -> list[tuple[Outcome, int]]:
    """Every stored outcome with its run's number, in the order the runner runs them (`order`); an outcome of a
    benchmark no longer run comes last."""
    rank = {k: i for i, k in enumerate(order)}
    found = [(o, r["number"]) for r in runs for o in r["outcomes"]]
    return sorted(found, key=lambda pair: (rank.get(key(pair[0]), len(rank)), pair[1]))


def node_counts(runs: Sequence[Run]) -> list[int]:
    """Every kwok node count in the store: of per-size runs and of figures measured at one."""
    counts = {o["nodes"] for r in runs for o in r["outcomes"] if o["nodes"] is not None}
    counts |= {f["nodes"] for r in runs for o in r["outcomes"] for f in o["figures"] if f["nodes"] is not None}
    return sorted(counts)


def figure_rows(outcomes: Sequence[tuple[Outcome, int]]) -> list[tuple[str, ...]]:
    """`fig.rows` with the run each figure came from, ordered by P-id as there."""
    found = [(fig.Figure.from_json(f), number) for o, number in outcomes for f in o["figures"]]
    found.sort(key=lambda pair: fig.sort_key(pair[0]))
    return [(*fig.rows([f])[0], str(number)) for f, number in found]


def label(outcome: Outcome) -> str:
    nodes = outcome["nodes"]
    return str(outcome["module"]) + (f" ({nodes:,} nodes)" if nodes is not None else "")


def time_rows(outcomes: Sequence[tuple[Outcome, int]]) -> list[tuple[str, ...]]:
    return [
        (label(o), ", ".join(o["ids"]), str(number), f"{o['seconds']:.0f}", o["error"] or "ok")
        for o, number in outcomes
    ]


def load_text(load: dict[str, float | None]) -> str:
    def one(value: float | None) -> str:
        return "?" if value is None else f"{value:.1f}"

    return f"{one(load.get('start'))} → {one(load.get('end'))}"


def run_rows(runs: Sequence[Run]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in runs:
        date, commit = r["machine"].get("date", ""), r["machine"].get("git commit", "")
        rows.append((str(r["number"]), date, load_text(r["load"]), commit, f"`{r['command']}`"))
    return rows


def machine_section(runs: Sequence[Run]) -> str:
    newest = runs[-1]["machine"]
    text = fig.markdown(("", ""), [(k, newest.get(k, "")) for k in MACHINE])
    other = [str(r["number"]) for r in runs if any(r["machine"].get(k) != newest.get(k) for k in MACHINE[:3])]
    if other:
        text += f"\nRun {', '.join(other)} ran on another machine (its facts are in benchmarks/results.json).\n"
    return text


def render(runs: Sequence[Run], order: Sequence[Key]) -> str:
    """RESULTS.md: the newest machine, the runs, every stored figure with its run, growth, run time, notes."""
    outcomes = ordered(runs, order)
    counts = node_counts(runs)
    found = [fig.Figure.from_json(f) for o, _ in outcomes for f in o["figures"]]
    parts = [
        "# Benchmark results\n",
        "Rendered from `benchmarks/results.json`, into which every `python -m benchmarks --write` merges its run: "
        "a benchmark (module, and node count for the operator) keeps the outcome of the newest run that ran it, "
        "and the run column says which run that was (docs/benchmarks.md says what each figure measures and its "
        "goal). Every reference was measured in the same run as its value; a verdict is computed from the goal "
        "and the value.\n",
        "## Machine\n",
        machine_section(runs),
        "## Runs\n",
        fig.markdown(("run", "date", "load average (1 min), start → end", "git commit", "command"), run_rows(runs)),
        "Other work on the machine slows every figure: the load average says how much there was.\n",
        "## Figures\n",
        fig.markdown((*fig.COLUMNS, "run"), figure_rows(outcomes)),
        "## Growth with the kwok node count\n",
        fig.markdown(("measure", *(f"{n:,} nodes" for n in counts)), fig.growth(found, counts)),
        "## Run time per benchmark\n",
        fig.markdown(("module", "figures", "run", "seconds", "outcome"), time_rows(outcomes)),
    ]
    notes = [f"- Run {r['number']}: {n}\n" for r in runs for n in r["notes"]]
    if notes:
        parts += ["## Notes\n", "".join(notes)]
    return "\n".join(parts)
