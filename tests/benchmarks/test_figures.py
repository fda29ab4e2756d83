"""The pure parts of ``python -m benchmarks`` (`benchmarks.figures`, `benchmarks.__main__`): issue 26 item 4.

Aspects: the verdict follows from the goal, the value and the reference (each kind of goal, on both sides of
its limit and at it; no reference means the goal cannot be checked); an error is its own verdict; a figure
survives the JSON between the child process and the runner; the Markdown table has a row per figure with its
goal and verdict, and escapes a ``|``; the growth table pivots figures by node count and says "not run" for a
size without one; a module that fails becomes an error row per P-id while the next module still runs.
"""

from __future__ import annotations

import math
import pathlib

import pytest

from benchmarks import __main__ as runner
from benchmarks import figures as fig
from benchmarks import results


def figure(goal: fig.Goal, value: float, ref: float | None = None, **kw: object) -> fig.Figure:
    return fig.Figure(id="P0", what="a measure", goal=goal, value=value, unit="ms", reference_value=ref, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("goal", "value", "reference", "verdict"),
    [
        (fig.at_most(1.0, "ms"), 0.9, None, fig.Verdict.MET),
        (fig.at_most(1.0, "ms"), 1.0, None, fig.Verdict.MET),
        (fig.at_most(1.0, "ms"), 1.01, None, fig.Verdict.MISSED),
        (fig.at_most(0), 0, None, fig.Verdict.MET),
        (fig.at_most(0), 3, None, fig.Verdict.MISSED),
        (fig.at_least(20.0), 19.9, None, fig.Verdict.MISSED),
        (fig.at_least(20.0), 25.0, None, fig.Verdict.MET),
        (fig.ratio_at_most(1.2), 11.9, 10.0, fig.Verdict.MET),
        (fig.ratio_at_most(1.2), 12.5, 10.0, fig.Verdict.MISSED),
        (fig.ratio_at_most(1.2), 12.5, None, fig.Verdict.REPORTED),
        (fig.ratio_at_least(0.8), 8.5, 10.0, fig.Verdict.MET),
        (fig.ratio_at_least(0.8), 7.5, 10.0, fig.Verdict.MISSED),
        (fig.speedup_at_least(20.0), 2.0, 50.0, fig.Verdict.MET),
        (fig.speedup_at_least(20.0), 2.0, 30.0, fig.Verdict.MISSED),
        (fig.added_at_most(5.0, "ms"), 104.0, 100.0, fig.Verdict.MET),
        (fig.added_at_most(5.0, "ms"), 106.0, 100.0, fig.Verdict.MISSED),
        (fig.reported(), 1e9, 1.0, fig.Verdict.REPORTED),
        (fig.at_most(1.0, "ms"), math.nan, None, fig.Verdict.REPORTED),
    ],
)
def test_the_verdict_follows_from_goal_value_and_reference(
    goal: fig.Goal, value: float, reference: float | None, verdict: fig.Verdict
) -> None:
    assert figure(goal, value, reference).verdict is verdict


def test_an_error_is_its_own_verdict_whatever_the_value() -> None:
    assert figure(fig.at_most(1.0), 0.5, error="no kubelet").verdict is fig.Verdict.ERROR
    rows = fig.failed(["P1", "P3"], "the operator", "exit 1: boom")
    assert [(f.id, f.verdict, f.error) for f in rows] == [
        ("P1", fig.Verdict.ERROR, "exit 1: boom"),
        ("P3", fig.Verdict.ERROR, "exit 1: boom"),
    ]


def test_measured_text_shows_the_ratio_or_the_difference_to_the_reference() -> None:
    assert "1.50×" in figure(fig.ratio_at_most(1.2), 15.0, 10.0).measured()
    assert "+6.0 ms" in figure(fig.added_at_most(5.0, "ms"), 106.0, 100.0).measured()
    assert "50×" in figure(fig.speedup_at_least(20), 2.0, 100.0).measured()


def test_a_figure_survives_the_json_between_child_and_runner() -> None:
    original = figure(fig.ratio_at_most(1.2, "at 1,000 nodes"), 12.5, 10.0, nodes=1000, reference="floor: 10 s")
    assert fig.Figure.from_json(original.to_json()) == original
    failed = fig.failed(["P9"], "images", "no buildah")[0]
    back = fig.Figure.from_json(failed.to_json())
    assert math.isnan(back.value) and back.error == "no buildah" and back.verdict is fig.Verdict.ERROR


def test_markdown_has_a_row_per_figure_with_goal_and_verdict() -> None:
    found = [
        fig.Figure("P5", "Allocate p99", fig.at_most(1.0, "ms"), 0.4, "ms", "echo | 0.2 ms", 0.2),
        fig.Figure("P4", "one decision", fig.at_most(5.0, "ms"), 7.5, "ms"),
        fig.Figure("P12", "slices", fig.reported(), error="no real node"),
    ]
    text = fig.markdown(fig.COLUMNS, fig.rows(found))
    lines = text.strip().splitlines()
    assert len(lines) == 2 + len(found)
    p4 = next(line for line in lines if "one decision" in line)
    assert "≤ 5 ms" in p4 and "7.50 ms" in p4 and "missed" in p4
    p5 = next(line for line in lines if "Allocate p99" in line)
    assert "met" in p5 and "echo \\| 0.2 ms" in p5
    assert "error: no real node" in next(line for line in lines if "slices" in line)
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["P4", "P5", "P12"]  # in P order


def test_growth_pivots_by_node_count_and_says_what_was_not_run() -> None:
    found = [
        fig.Figure("P1", "install", fig.ratio_at_most(1.2), 30.0, "s", reference_value=20.0, nodes=100),
        fig.Figure("P1", "install", fig.ratio_at_most(1.2), 220.0, "s", reference_value=200.0, nodes=1000),
        fig.Figure("P3", "rss", fig.at_most(100.0, "MiB"), 61.5, "MiB", nodes=1000),
        # Above the full rows P1 has only its CPU share (a percentage), which is not an install time.
        fig.Figure("P1", "CPU share", fig.at_most(2.0, "%"), 2.0, "%", nodes=5000),
    ]
    table = {row[0]: row[1:] for row in fig.growth(found, [100, 1000, 5000])}
    p1 = next(v for k, v in table.items() if k.startswith("P1 CR"))
    ratio = next(v for k, v in table.items() if k.startswith("P1 ratio"))
    share = next(v for k, v in table.items() if k.startswith("P1 operator CPU"))
    p3 = next(v for k, v in table.items() if k.startswith("P3"))
    assert p1 == ["30", "220", "not run"]
    assert ratio[0] == "1.50×" and ratio[1] == "1.10×" and ratio[2] == "not run"
    assert share == ["not run", "not run", "2"]
    assert p3 == ["not run", "61.5", "not run"]


def test_results_markdown_names_the_machine_and_every_figure() -> None:
    module = runner.Module("rollout", ("P4",), "one decision")
    outcome = runner.Outcome(module, 2.0, [fig.Figure("P4", "one decision", fig.at_most(5.0, "ms"), 3.0, "ms")])
    run = results.new_run(runner.machine(), "python -m benchmarks --write", ["5,000 not run"], [runner.stored(outcome)])
    text = results.render(results.merge([], run), [("rollout", None)])
    for key in ("CPU", "cores", "RAM", "kernel", "Python"):
        assert f"| {key} |" in text
    assert "one decision" in text and "5,000 not run" in text and "| rollout | P4 | 1 | 2 | ok |" in text


def test_a_failing_module_becomes_an_error_row_and_the_next_one_still_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    broken = runner.Module("no_such_benchmark", ("P98",), "a module that cannot be imported")
    monkeypatch.setattr(runner, "MODULES", (broken, runner.Module("rollout", ("P4",), "one decision")))
    assert runner.main(["--quick", "--logs", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    error_row = next(line for line in out.splitlines() if "P98" in line)
    assert "error" in error_row
    assert "no_such_benchmark" in out  # the child's last line: the import error
    assert any("P4" in line and " ms" in line for line in out.splitlines())


def test_a_per_size_module_runs_once_per_node_count_and_the_costliest_runs_come_last() -> None:
    scale = runner.Module("operator_scale", ("P1",), "the operator", per_size=True)
    pods = runner.Module("realpods", ("P8",), "in pods", late=True)
    rollout = runner.Module("rollout", ("P4",), "one decision")
    runs = runner.plan([scale, pods, rollout], [100, 1000, 5000], quick=False)
    assert [(m.name, sizes, size) for m, sizes, size in runs] == [
        ("rollout", [100, 1000, 5000], None),
        ("operator_scale", [100], 100),
        ("operator_scale", [1000], 1000),
        ("realpods", [100, 1000, 5000], None),
        ("operator_scale", [5000], 5000),
    ]
    assert len(runner.plan([scale], [100, 1000], quick=True)) == 1


def test_a_spent_budget_leaves_error_rows_that_say_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(runner, "MODULES", (runner.Module("rollout", ("P4",), "one decision"),))
    assert runner.main(["--budget", "0", "--logs", str(tmp_path)]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if "P4" in line)
    assert "error" in row and "budget" in row


def test_a_module_over_its_timeout_is_stopped_and_becomes_an_error_row(tmp_path: pathlib.Path) -> None:
    module = runner.Module("rollout", ("P4",), "one decision")
    outcome = runner.run_module(module, True, [100], 0.05, tmp_path)
    assert outcome.error == "timed out after 0 s"
    assert [(f.id, f.verdict) for f in outcome.figures] == [("P4", fig.Verdict.ERROR)]
