"""``python -m benchmarks`` as a user runs it (issue 26 item 4), and ``--write``'s results store.

Aspects: ``--only P4 --quick`` (the cheapest figure, pure) exits 0 and prints one table whose P4 row has a
measured number in ms and a verdict of met or missed (the goal was checked, not skipped); without ``--write``
it leaves benchmarks/RESULTS.md as it was. ``--write`` merges into benchmarks/results.json: a run replaces
only the stored outcomes of the same module and node count, the others keep their run number, and a run left
with none is dropped; RESULTS.md, rendered from the whole store, gives each figure's run and a growth column
per node count in the store; ``--write --quick`` is refused; ``--from-logs`` stores an earlier run from a
logs directory as `run_module` leaves it (a stem with only its log, or none, is an error row; a module's
seconds come from its files' times); a run someone stops (SIGINT to its module) writes nothing; ``--full-rows-to``
reaches only a module that takes it, is refused without one, and moves operator_scale's whole rows past 1,000.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from benchmarks import __main__ as runner
from benchmarks import figures as fig
from benchmarks import results

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
ROLLOUT = runner.Module("rollout", ("P4",), "one decision")
SCALE = runner.Module("operator_scale", ("P1", "P3"), "the operator", per_size=True)
ORDER = [("rollout", None), ("operator_scale", 100), ("operator_scale", 1000), ("operator_scale", 5000)]
FACTS = {"CPU": "a CPU", "cores": "2", "RAM": "1.0 GiB", "kernel": "6.1", "Python": "3.11.7", "git commit": "abc"}


def test_only_p4_quick_prints_p4_with_a_number_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    before = RESULTS.read_bytes() if RESULTS.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "P4", "--quick", "--logs", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if re.search(r"\bP4\b", line)]
    assert rows, done.stdout
    assert re.search(r"\d+(\.\d+)? ms", rows[0]), rows[0]
    assert re.search(r"\b(met|missed)\b", rows[0]), rows[0]
    assert not any(re.search(r"\bP(1|5|11)\b", line) for line in done.stdout.splitlines())  # only P4 ran
    assert (RESULTS.read_bytes() if RESULTS.exists() else None) == before


def table(markdown: str, section: str) -> list[dict[str, str]]:
    """The rows of the first table under ``## section``, as dicts by column."""
    lines = markdown.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines if line.startswith("|")]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def p1(nodes: int, value: float) -> fig.Figure:
    return fig.Figure("P1", f"CR → pods Ready, {nodes:,} nodes", fig.reported(), value, "s", nodes=nodes)


def outcome(module: runner.Module, figures: list[fig.Figure], nodes: int | None = None) -> results.Outcome:
    return runner.stored(runner.Outcome(module, 3.0, figures, nodes=nodes))


def p4(value: float) -> results.Outcome:
    return outcome(ROLLOUT, [fig.Figure("P4", "one decision", fig.at_most(5.0, "ms"), value, "ms")])


def run(*outcomes: results.Outcome, note: str = "") -> results.Run:
    return results.new_run({**FACTS, "date": "today"}, "python -m benchmarks --write", [note] if note else [], outcomes)


def test_a_run_replaces_only_the_outcomes_it_measured_again_and_the_others_keep_their_run() -> None:
    first = run(p4(6.0), outcome(SCALE, [p1(100, 20.0)], 100), outcome(SCALE, [p1(1000, 200.0)], 1000))
    runs = results.merge([], first)
    runs = results.merge(runs, run(outcome(SCALE, [p1(1000, 150.0)], 1000), outcome(SCALE, [p1(5000, 900.0)], 5000)))
    assert [r["number"] for r in runs] == [1, 2]
    assert [results.key(o) for o in runs[0]["outcomes"]] == [("rollout", None), ("operator_scale", 100)]
    rows = table(results.render(runs, ORDER), "Figures")
    assert [(r["P"], r["measured"], r["run"]) for r in rows] == [
        ("P1", "20 s", "1"),
        ("P1", "150 s", "2"),
        ("P1", "900 s", "2"),
        ("P4", "6 ms", "1"),
    ]
    assert next(r for r in rows if r["P"] == "P4")["verdict"] == "missed"  # computed from the stored goal


def test_a_run_left_without_outcomes_is_dropped_and_the_next_number_follows_the_highest() -> None:
    runs = results.merge(results.merge([], run(p4(6.0), note="the first")), run(p4(7.0)))
    runs = results.merge(runs, run(p4(4.0), note="the third"))
    assert [r["number"] for r in runs] == [3]
    text = results.render(runs, ORDER)
    assert [r["run"] for r in table(text, "Runs")] == ["3"]
    assert [(r["measured"], r["verdict"], r["run"]) for r in table(text, "Figures")] == [("4 ms", "met", "3")]
    assert "the first" not in text and "Run 3: the third" in text


def test_the_render_has_a_growth_column_per_node_count_in_the_store_and_run_columns() -> None:
    runs = results.merge([], run(outcome(SCALE, [p1(100, 20.0)], 100)))
    runs = results.merge(runs, run(outcome(SCALE, [p1(5000, 900.0)], 5000)))
    text = results.render(runs, ORDER)
    growth = table(text, "Growth with the kwok node count")
    assert list(growth[0]) == ["measure", "100 nodes", "5,000 nodes"]
    assert [growth[0]["100 nodes"], growth[0]["5,000 nodes"]] == ["20", "900"]
    times = table(text, "Run time per benchmark")
    assert [(r["module"], r["run"]) for r in times] == [
        ("operator_scale (100 nodes)", "1"),
        ("operator_scale (5,000 nodes)", "2"),
    ]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    """The store and RESULTS.md in tmp_path, and a runner that knows only `ROLLOUT` and `SCALE`."""
    monkeypatch.setattr(runner, "STORE", tmp_path / "results.json")
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "RESULTS.md")
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    monkeypatch.setattr(runner, "MODULES", (ROLLOUT, SCALE))
    return tmp_path


def test_write_with_quick_is_refused_and_writes_nothing(store: pathlib.Path) -> None:
    with pytest.raises(SystemExit) as refused:
        runner.main(["--only", "P4", "--quick", "--write", "--logs", str(store / "logs")])
    assert refused.value.code == 2
    assert not (store / "results.json").exists() and not (store / "RESULTS.md").exists()
    assert not (store / "logs").exists()  # refused before anything ran


def logs_dir(where: pathlib.Path, figures: dict[str, list[fig.Figure]], only_log: dict[str, str]) -> pathlib.Path:
    """A logs directory as `run_module` leaves it: ``STEM.json`` and ``STEM.log``, or only the log."""
    where.mkdir()
    for stem, found in figures.items():
        (where / f"{stem}.log").write_text("")
        (where / f"{stem}.json").write_text(json.dumps([f.to_json() for f in found]))
    for stem, tail in only_log.items():
        (where / f"{stem}.log").write_text(f"Traceback ...\n{tail}\n")
    return where


def test_from_logs_stores_an_earlier_run_and_a_later_one_merges_into_it(store: pathlib.Path) -> None:
    figures = {"rollout": [fig.Figure("P4", "one decision", fig.at_most(5.0, "ms"), 6.0, "ms")]}
    figures["operator_scale-100"] = [
        p1(100, 20.0),
        fig.Figure("P3", "RSS", fig.at_most(100, "MiB"), 57, "MiB", nodes=100),
    ]
    logs = logs_dir(store / "logs", figures, {"operator_scale-1000": "KeyboardInterrupt"})
    facts = store / "facts.json"
    facts.write_text(json.dumps({**FACTS, "date": "yesterday", "command": "python -m benchmarks --write --budget 9"}))
    given = ["--write", "--from-logs", str(logs), "--facts-json", str(facts), "--budget", "9", "--note", "seeded"]
    assert runner.main([*given, "--error", "operator_scale-1000=timed out after 7 s"]) == 1  # it has error rows

    (first,) = json.loads((store / "results.json").read_text())
    assert first["command"] == "python -m benchmarks --write --budget 9" and first["notes"] == ["seeded"]
    errors = {(o["module"], o["nodes"]): o["error"] for o in first["outcomes"]}
    assert errors == {
        ("rollout", None): "",
        ("operator_scale", 100): "",
        ("operator_scale", 1000): "timed out after 7 s",
        ("operator_scale", 5000): "not run: the --budget of 9 s was spent",
    }
    rows = table((store / "RESULTS.md").read_text(), "Figures")
    assert [(r["P"], r["measured"], r["verdict"], r["run"]) for r in rows] == [
        ("P1", "20 s", "reported", "1"),
        ("P1", "—", "error: timed out after 7 s", "1"),
        ("P1", "—", "error: not run: the --budget of 9 s was spent", "1"),
        ("P3", "57 MiB", "met", "1"),
        ("P3", "—", "error: timed out after 7 s", "1"),
        ("P3", "—", "error: not run: the --budget of 9 s was spent", "1"),
        ("P4", "6 ms", "missed", "1"),
    ]

    later = logs_dir(
        store / "later", {"rollout": [fig.Figure("P4", "one decision", fig.at_most(5.0, "ms"), 4.0, "ms")]}, {}
    )
    assert runner.main(["--write", "--only", "P4", "--from-logs", str(later), "--facts-json", str(facts)]) == 0
    text = (store / "RESULTS.md").read_text()
    assert [(r["P"], r["measured"], r["verdict"], r["run"]) for r in table(text, "Figures") if r["P"] == "P4"] == [
        ("P4", "4 ms", "met", "2")
    ]
    assert {r["run"] for r in table(text, "Figures") if r["P"] == "P1"} == {"1"}
    assert [r["run"] for r in table(text, "Runs")] == ["1", "2"]
    assert list(table(text, "Growth with the kwok node count")[0])[1:] == ["100 nodes", "1,000 nodes", "5,000 nodes"]


def test_from_logs_without_a_stored_json_takes_the_logs_last_line(store: pathlib.Path) -> None:
    logs = logs_dir(store / "logs", {}, {"rollout": "ImportError: no module named x"})
    facts = store / "facts.json"
    facts.write_text(json.dumps({**FACTS, "date": "yesterday"}))
    assert runner.main(["--write", "--only", "P4", "--from-logs", str(logs), "--facts-json", str(facts)]) == 1
    (only,) = json.loads((store / "results.json").read_text())[0]["outcomes"]
    assert only["error"] == "no figures: ImportError: no module named x"


def test_from_logs_takes_each_modules_seconds_from_its_files_times(tmp_path: pathlib.Path) -> None:
    written = {"rollout.log": 100.0, "rollout.json": 101.5, "operator_scale-100.log": 102.0}
    written |= {"operator_scale-100.json": 341.5, "operator_scale-1000.log": 729.0}
    for name, when in written.items():
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (when, when))
    found = runner.durations(tmp_path, ["rollout", "operator_scale-100", "operator_scale-1000", "realpods"])
    assert found == {"rollout": 1.5, "operator_scale-100": 240.0, "operator_scale-1000": 387.5}


def test_a_timed_out_module_started_with_sigint_ignored_still_stops_what_it_started(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run in the background (``nohup python -m benchmarks … &``) starts with SIGINT ignored, and its children
    inherit that: the timeout's SIGINT must still reach the module's context managers (the control planes)."""
    sleeper = runner.Module("tests.benchmarks.benchmark_sleeper", ("P0",), "sleeps")
    monkeypatch.setattr(runner, "INTERRUPT_GRACE", 20.0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        found = runner.run_module(sleeper, quick=True, nodes=(), timeout=10.0, logs=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    log = (tmp_path / "tests.benchmarks.benchmark_sleeper.log").read_text()
    assert "started" in log, log  # the timeout came while it ran, not before it began
    assert found.error == "timed out after 10 s"
    assert "cleaned up" in log and "KeyboardInterrupt" in log, log


def test_a_run_someone_stops_writes_nothing(store: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT to a module's child (how one stops a run started with ``nohup … &``) is not a timeout: the run
    ends without --write merging an error row over the figure stored for that module."""
    sleeper = runner.Module("tests.benchmarks.benchmark_sleeper", ("P0",), "sleeps")
    monkeypatch.setattr(runner, "MODULES", (sleeper,))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child runs in the store's directory
    logs = store / "logs"
    ended: list[int] = []
    run = threading.Thread(target=lambda: ended.append(runner.main(["--only", "P0", "--write", "--logs", str(logs)])))
    run.start()
    log = logs / f"{runner.stem(sleeper, None)}.log"
    deadline = time.monotonic() + 60
    while "started" not in (log.read_text() if log.is_file() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "started" in log.read_text(), log.read_text()
    child = subprocess.run(["pgrep", "-f", "--", f"--child {sleeper.name}"], capture_output=True, text=True, check=True)
    for pid in child.stdout.split():
        os.kill(int(pid), signal.SIGINT)
    run.join(60)
    assert ended == [130]
    assert "cleaned up" in log.read_text()
    assert not (store / "results.json").exists() and not (store / "RESULTS.md").exists()


@pytest.mark.parametrize(("full_rows", "given"), [(True, 5000.0), (False, 1000.0)])
def test_full_rows_to_reaches_only_a_module_that_takes_it(
    tmp_path: pathlib.Path, full_rows: bool, given: float
) -> None:
    """``--full-rows-to`` reaches the child of a `Module.full_rows` module; any other module's ``figures`` is
    called as before (it has no such parameter), so a run of every module with the flag does not fail them."""
    module = runner.Module("tests.benchmarks.benchmark_rows", ("P0",), "rows", full_rows=full_rows)
    found = runner.run_module(module, quick=False, nodes=(5000,), timeout=60.0, logs=tmp_path, full_rows_to=5000)
    assert not found.error, found.error
    assert [f.value for f in found.figures] == [given]


def test_full_rows_to_without_the_operator_figures_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        runner.main(["--only", "P4", "--full-rows-to", "5000"])
    assert refused.value.code == 2
    assert "--full-rows-to" in capsys.readouterr().err


def test_operator_scale_measures_whole_rows_up_to_full_rows_to_and_p3_alone_above(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import operator_scale

    rows: list[list[int]] = []
    alone: list[int] = []
    monkeypatch.setattr(operator_scale, "measure", lambda sizes, *_a, **_k: rows.append(list(sizes)) or [])
    monkeypatch.setattr(operator_scale, "fleet_figures", lambda n, _extra: alone.append(n) or [])
    operator_scale.figures(nodes=(100, 1000, 5000))
    assert (rows, alone) == ([[100, 1000]], [5000])
    rows.clear()
    alone.clear()
    operator_scale.figures(nodes=(100, 1000, 5000), full_rows_to=5000)
    assert (rows, alone) == ([[100, 1000, 5000]], [])
