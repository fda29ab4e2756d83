"""``python -m benchmarks``: every benchmark in sequence, one table of every P-figure, and how cost grows.

Why this module exists: issue 26 item 4 asks for one command that runs every benchmark and prints every
performance figure with its goal, the value measured and the reference measured in the same run, plus how the
operator's cost grows with the kwok node count, and for ``benchmarks/RESULTS.md`` to keep the latest figures and
the machine they ran on.

    python -m benchmarks [--only P1,P5] [--nodes 100,1000,5000] [--quick] [--write] [--timeout S] [--note TEXT]
                         [--full-rows-to N]
    python -m benchmarks --write --from-logs DIR --facts-json FILE [--error STEM=TEXT] [--budget S] [--note TEXT]

Each module runs in its own subprocess (``--child``: its ``figures()`` as JSON), so one that fails, times out
or lacks a prerequisite becomes a row with its error and the others still run; the exit code is then 1. A goal
missed is a result, not a failure (exit 0). ``--write`` merges the run into ``benchmarks/results.json``
(`benchmarks.results`: an outcome replaces only the stored one of the same module and node count) and renders
RESULTS.md from the whole store; a ``--quick`` run is never written. ``--from-logs`` stores an earlier run from
its logs directory instead of running. docs/benchmarks.md lists the figures and their goals.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from benchmarks import results

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
STORE = ROOT / "benchmarks" / "results.json"
DEFAULT_NODES = (100, 1000, 5000)


@dataclasses.dataclass(frozen=True)
class Module:
    name: str
    ids: tuple[str, ...]
    what: str
    per_size: bool = False
    """One child per kwok node count: a size that fails or runs out of time leaves the smaller ones' figures."""
    late: bool = False
    """Runs after the operator's node counts up to `LATE_SIZE`: its figures add to ones other modules give."""
    full_rows: bool = False
    """Its ``figures()`` takes ``full_rows_to``: the largest node count it measures every one of its figures at."""


LATE_SIZE = 1000
"""The operator's node counts above this run last, after every module: the most costly rows come last, so a
``--budget`` that runs out cuts them, not the figures every other module gives."""


MODULES = (
    Module("rollout", ("P4",), "one rollout decision"),
    Module("device_plugin", ("P5", "P6"), "gpu-device Allocate and health push"),
    Module("exporter", ("P7",), "data-exporter scrape"),
    Module("dra", ("P12",), "DRA driver"),
    Module("scheduler", ("P11",), "gpu-scheduler extender"),
    Module("agents", ("P8", "P2"), "node agents on a 16-GPU host"),
    Module("container_edit", ("P10", "P8"), "runtime wrapper and edit service"),
    Module("container_runtime", ("P8",), "container-runtime agent"),
    Module("images", ("P9",), "the product's images"),
    Module("realpods", ("P8",), "components as real pods", late=True),
    Module("release", ("P9",), "a release: platforms, registry, bundle, pulled pods", late=True),
    Module("operator_scale", ("P1", "P2", "P3"), "the operator on kwok nodes", per_size=True, full_rows=True),
    Module("upgrade", ("R-UPGRADE",), "the operator's own upgrade: the agents' roll on kwok nodes"),
    Module("drain", ("R-ROLLOUT",), "a driver rollout draining a busy fleet on kwok nodes"),
)


@dataclasses.dataclass
class Outcome:
    module: Module
    seconds: float
    figures: list[fig.Figure]
    error: str = ""
    nodes: int | None = None
    """The node count of a per-size run."""

    @property
    def label(self) -> str:
        return self.module.name + (f" ({self.nodes:,} nodes)" if self.nodes is not None else "")


def selected(only: Sequence[str]) -> list[Module]:
    if not only:
        return list(MODULES)
    wanted = {i.strip().upper() for i in only}
    unknown = wanted - {i for m in MODULES for i in m.ids}
    if unknown:
        raise SystemExit(f"unknown figure(s): {', '.join(sorted(unknown))}")
    return [m for m in MODULES if wanted & set(m.ids)]


def run_child(name: str, quick: bool, nodes: Sequence[int], out: pathlib.Path, full_rows_to: int | None = None) -> int:
    """In the child process: one module's figures, as JSON, to ``out``. ``name`` is a module of this package,
    or a dotted path (tests give one of their own); ``full_rows_to`` is given only to a `Module.full_rows` one."""
    # A run started in the background (``nohup … &``) starts with SIGINT ignored, and so does every child; Python
    # then installs no handler, and `run_module`'s SIGINT at a timeout would go unheard until its SIGKILL, leaving
    # the control planes and nodes the module started. Answer it as in a terminal: KeyboardInterrupt, and the
    # module's context managers stop them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    module = importlib.import_module(name if "." in name else f"benchmarks.{name}")
    given = {} if full_rows_to is None else {"full_rows_to": full_rows_to}
    found: list[fig.Figure] = module.figures(quick=quick, nodes=tuple(nodes), **given)
    out.write_text(json.dumps([f.to_json() for f in found]))
    return 0


def stem(module: Module, size: int | None) -> str:
    """The name of a module's ``.json`` and ``.log`` in the logs directory."""
    return module.name + (f"-{size}" if size is not None else "")


class Interrupted(Exception):
    """Someone stopped the run (SIGINT to a module, or Ctrl-C): what it measured so far is not a result."""


INTERRUPT_GRACE = 120.0
"""Seconds a timed-out module gets after SIGINT to stop what it started, before SIGKILL."""


def run_module(
    module: Module,
    quick: bool,
    nodes: Sequence[int],
    timeout: float | None,
    logs: pathlib.Path,
    size: int | None = None,
    full_rows_to: int | None = None,
) -> Outcome:
    name = stem(module, size)
    out, log = logs / f"{name}.json", logs / f"{name}.log"
    command = [sys.executable, "-m", "benchmarks", "--child", module.name, "--out", str(out)]
    command += ["--nodes", ",".join(map(str, nodes))] + (["--quick"] if quick else [])
    if full_rows_to is not None and module.full_rows:
        command += ["--full-rows-to", str(full_rows_to)]
    began = time.monotonic()
    with log.open("wb") as handle:
        child = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
        try:
            code: int | None = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            child.send_signal(signal.SIGINT)  # its context managers stop the control planes and nodes it started
            try:
                child.wait(timeout=INTERRUPT_GRACE)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    seconds = time.monotonic() - began
    if code == -signal.SIGINT:  # not the timeout's SIGINT (code is None then): someone stopped it
        raise Interrupted(f"{name} was stopped by SIGINT after {seconds:.0f} s")
    if code == 0 and out.is_file():
        return Outcome(module, seconds, [fig.Figure.from_json(d) for d in json.loads(out.read_text())], nodes=size)
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
    error = f"timed out after {timeout or 0:.0f} s" if code is None else f"exit {code}: {tail[0][-300:]}"
    return Outcome(module, seconds, fig.failed(module.ids, module.what, error, size), error, size)


def plan(modules: Sequence[Module], nodes: Sequence[int], quick: bool) -> list[tuple[Module, list[int], int | None]]:
    """(module, its node counts, the size of a per-size run) in the order they run: the modules, the operator's
    node counts up to `LATE_SIZE`, the ``late`` modules, then the larger node counts."""
    runs: list[tuple[int, Module, list[int], int | None]] = []
    for m in modules:
        if m.per_size and not quick:
            runs += [(1 if n <= LATE_SIZE else 3, m, [n], n) for n in nodes]
        else:
            runs.append((2 if m.late else 0, m, list(nodes), None))
    runs.sort(key=lambda run: run[0])  # stable: the registry's order within a phase
    return [(m, sizes, size) for _, m, sizes, size in runs]


def took(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def machine(started: float | None = None, load_at_start: float | None = None) -> dict[str, str]:
    model = ""
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = ""
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], check=False, cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit, dirty = git("rev-parse", "--short=12", "HEAD"), git("status", "--porcelain")
    return {
        "CPU": model or platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "RAM": memory,
        "kernel": platform.release(),
        "Python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        + (f" (the run took {took(time.monotonic() - started)})" if started is not None else ""),
        "load average (1 min)": (f"{load_at_start:.1f} at the start, " if load_at_start is not None else "")
        + f"{os.getloadavg()[0]:.1f} at the end (other work on the machine slows every figure)",
        "git commit": commit + (" (with uncommitted changes)" if dirty else ""),
    }


def stored(outcome: Outcome) -> results.Outcome:
    """An outcome as `results` stores it."""
    return {
        "module": outcome.module.name,
        "nodes": outcome.nodes,
        "ids": list(outcome.module.ids),
        "seconds": round(outcome.seconds, 1),
        "error": outcome.error,
        "figures": [f.to_json() for f in outcome.figures],
    }


def write(outcomes: Sequence[Outcome], facts: dict[str, str], command: str, notes: Sequence[str]) -> None:
    """Merge this run into `STORE` and render `RESULTS` from the whole store."""
    run = results.new_run(facts, command, notes, [stored(o) for o in outcomes])
    runs = results.merge(results.load(STORE), run)
    results.save(STORE, runs)
    counts = sorted({*DEFAULT_NODES, *results.node_counts(runs)})
    order = [(m.name, size) for m, _, size in plan(MODULES, counts, quick=False)]
    RESULTS.write_text(results.render(runs, order))
    print(
        f"merged run {runs[-1]['number']} into {STORE.relative_to(ROOT)}, wrote {RESULTS.relative_to(ROOT)}",
        file=sys.stderr,
    )


def spent(budget: float) -> str:
    return f"not run: the --budget of {budget:.0f} s was spent"


def durations(logs: pathlib.Path, names: Sequence[str]) -> dict[str, float]:
    """Each stem's seconds from its files' times in the logs directory: from the previous stem's last write to
    its own last write (the first stem: from its own first write). A stem without files has none."""
    times = {name: [p.stat().st_mtime for p in logs.glob(f"{name}.*")] for name in names}
    ran = sorted((max(t), min(t), name) for name, t in times.items() if t)
    found, previous = {}, None
    for last, first, name in ran:
        found[name] = last - (first if previous is None else previous)
        previous = last
    return found


def from_logs(
    logs: pathlib.Path, modules: Sequence[Module], nodes: Sequence[int], errors: dict[str, str], budget: float | None
) -> list[Outcome]:
    """The outcomes of an earlier run from its logs directory, as `run_module` left it: ``STEM.json`` holds the
    figures; a stem without it becomes an error row: the text given in `errors`, else the last line of its log,
    else not run (with the budget's text when `budget` is given)."""
    planned = [(m, size, stem(m, size)) for m, _, size in plan(modules, nodes, quick=False)]
    seconds = durations(logs, [name for _, _, name in planned])
    outcomes = []
    for module, size, name in planned:
        out, log = logs / f"{name}.json", logs / f"{name}.log"
        if out.is_file():
            found = [fig.Figure.from_json(d) for d in json.loads(out.read_text())]
            outcomes.append(Outcome(module, seconds[name], found, nodes=size))
            continue
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
        error = errors.get(name) or (f"no figures: {tail[0][-300:]}" if tail else "")
        error = error or (spent(budget) if budget is not None else "not run")
        figures = fig.failed(module.ids, module.what, error, size)
        outcomes.append(Outcome(module, seconds.get(name, 0.0), figures, error, size))
    return outcomes


def given_facts(path: pathlib.Path) -> dict[str, str]:
    """The facts `machine()` gave an earlier run, from a JSON dict (plus, optionally, its ``command``)."""
    facts = json.loads(path.read_text())
    needed = (*results.MACHINE, "date", "git commit")
    if not isinstance(facts, dict) or any(k not in facts for k in needed):
        raise SystemExit(f"{path}: not a JSON dict with the facts machine() gives ({', '.join(needed)})")
    return {k: str(v) for k, v in facts.items()}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated P-ids, e.g. P1,P5")
    parser.add_argument("--nodes", default=",".join(map(str, DEFAULT_NODES)), help="kwok node counts (P1–P3, P11)")
    parser.add_argument("--quick", action="store_true", help="fewer samples and smaller sizes: a look, not a result")
    parser.add_argument(
        "--write", action="store_true", help=f"merge the run into {STORE.relative_to(ROOT)} and render RESULTS.md"
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds per module before it becomes an error")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run; what is left unrun becomes an error row saying so",
    )
    parser.add_argument("--note", action="append", default=[], help="a line for RESULTS.md's notes")
    parser.add_argument("--logs", type=pathlib.Path, help="directory for each module's output (default: a new one)")
    parser.add_argument("--from-logs", type=pathlib.Path, help="with --write: an earlier run's --logs, not a new run")
    parser.add_argument("--facts-json", type=pathlib.Path, help="with --from-logs: that run's machine() facts")
    parser.add_argument(
        "--error", action="append", default=[], help="with --from-logs: STEM=TEXT, the error of a stem without JSON"
    )
    parser.add_argument(
        "--full-rows-to",
        type=int,
        default=None,
        metavar="N",
        help="operator_scale measures P1, P2 and P3 at node counts up to N (default 1000); "
        "above it P1's CPU share and P3, without the floor",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, help=argparse.SUPPRESS)
    return parser


def run_all(modules: Sequence[Module], nodes: Sequence[int], args: argparse.Namespace) -> list[Outcome]:
    outcomes = []
    logs = args.logs or pathlib.Path(tempfile.mkdtemp(prefix="metax-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget if args.budget is not None else None
    for module, sizes, size in plan(modules, nodes, args.quick):
        timeout = args.timeout
        left = deadline - time.monotonic() if deadline is not None else None
        if left is not None and left < 10:
            error = spent(args.budget)
            outcome = Outcome(module, 0.0, fig.failed(module.ids, module.what, error, size), error, size)
        else:
            if left is not None:
                timeout = min(timeout, left) if timeout is not None else left
            print(f"== {module.name} ({', '.join(module.ids)}) {sizes if size else ''}…", file=sys.stderr, flush=True)
            outcome = run_module(module, args.quick, sizes, timeout, logs, size, args.full_rows_to)
        print(f"   {outcome.seconds:.0f} s {outcome.error or 'ok'}", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    print(f"each module's output: {logs}", file=sys.stderr)
    return outcomes


def show(outcomes: Sequence[Outcome], wanted: set[str], nodes: Sequence[int]) -> None:
    """The figures asked for (all a module gives are stored with --write: its run measured them all)."""
    found = [f for o in outcomes for f in o.figures if not wanted or f.id in wanted]
    from rich.console import Console

    console = Console(width=200)
    console.print(
        fig.rich_table("Performance figures (reference measured in the same run)", fig.COLUMNS, fig.rows(found))
    )
    if any(f.nodes is not None for f in found):
        header = ("measure", *(f"{n:,} nodes" for n in nodes))
        console.print(fig.rich_table("Growth with the kwok node count", header, fig.growth(found, nodes)))


def command_line(argv: Sequence[str] | None) -> str:
    given = list(sys.argv[1:] if argv is None else argv)
    shown = [a for i, a in enumerate(given) if a != "--note" and (i == 0 or given[i - 1] != "--note")]
    return ("python -m benchmarks " + " ".join(shown)).strip()  # the notes are listed under Notes


def main(argv: Sequence[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    nodes = sorted({int(n) for n in args.nodes.split(",") if n.strip()})
    if args.child:
        return run_child(args.child, args.quick, nodes, args.out, args.full_rows_to)
    if args.write and args.quick:
        options.error("--write with --quick: a --quick run is a look, not a result, and is never stored")
    if args.from_logs and not (args.write and args.facts_json):
        options.error("--from-logs needs --write and --facts-json (the earlier run's machine() facts)")
    only = [i for i in args.only.split(",") if i.strip()]
    modules = selected(only)
    if args.full_rows_to is not None and not any(m.full_rows for m in modules):
        options.error("--full-rows-to is for operator_scale (P1, P2, P3), and none of them is selected")
    wanted = {i.strip().upper() for i in only}
    if args.from_logs:
        if any("=" not in e for e in args.error):
            options.error("--error takes STEM=TEXT, e.g. operator_scale-1000=timed out after 387 s")
        errors = dict(e.split("=", 1) for e in args.error)
        outcomes = from_logs(args.from_logs, modules, nodes, errors, args.budget)
        facts = given_facts(args.facts_json)
        command = facts.pop("command", command_line(argv))
    else:
        started, load_at_start = time.monotonic(), os.getloadavg()[0]
        try:
            outcomes = run_all(modules, nodes, args)
        except (Interrupted, KeyboardInterrupt) as exc:
            # An error row would replace the stored figure it was meant to measure again (run 6 did so once).
            print(f"interrupted ({exc or 'Ctrl-C'}): nothing shown, nothing written", file=sys.stderr)
            return 130
        facts, command = machine(started, load_at_start), command_line(argv)
    show(outcomes, wanted, nodes)
    if args.write:
        write(outcomes, facts, command, args.note)
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
