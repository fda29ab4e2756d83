"""The demo's player: each step's commands, what the cluster then says, and a live view while they run.

Why a module of its own: the in-memory and process-node demos (`cli`) and the real-node demo (`realnode`) play
their steps the same way; only what a step acts on and what the view shows differ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from rich.console import Console, RenderableType
from rich.live import Live

from metax_core.errors import MetaxError
from metax_dev.demo import scenario

EXIT_OK, EXIT_FAILED = 0, 1
S = TypeVar("S")


def play(
    console: Console,
    steps: Sequence[scenario.Step[S]],
    subject: S,
    *,
    lines: Callable[[], list[str]],
    table: Callable[[], RenderableType] | None,
    logs: Sequence[Path],
    failures: tuple[type[Exception], ...] = (),
) -> int:
    """Each step's commands, then what the cluster says (or why it failed: then ``lines()`` and the ``logs``'
    tails, and the rest is skipped); ``table``: a live view refreshed while the steps run (else ``lines()`` after
    each step). ``failures``: more exceptions that mean a step failed (the real-node demo's helm, kubectl and
    kubernetes client errors), printed as such, not as a traceback."""
    expected: tuple[type[Exception], ...] = (scenario.StepFailed, MetaxError, OSError, *failures)
    done = threading.Event()
    with Live(table(), console=console, refresh_per_second=4) if table is not None else _NoLive() as shown:
        if table is not None:
            threading.Thread(target=_refresh, args=(shown, table, done), daemon=True).start()
        try:
            for number, step in enumerate(steps, 1):
                console.rule(f"[bold]{number}/{len(steps)} {step.title}")
                for command in step.commands:
                    console.print(f"$ {command}", markup=False, highlight=False)
                began = time.monotonic()
                try:
                    said = step.run(subject)
                except expected as exc:
                    console.print(f"[red]step failed[/red]: {exc}", highlight=False)
                    for line in lines():
                        console.print(f"  {line}", markup=False, highlight=False)
                    _log_tail(console, logs)
                    return EXIT_FAILED
                for line in said:
                    console.print(f"  {line}", markup=False, highlight=False)
                console.print(f"  [green]ok[/green] ({time.monotonic() - began:.1f}s)")
                if table is None:
                    for line in lines():
                        console.print(f"  | {line}", markup=False, highlight=False)
        finally:
            done.set()
    return EXIT_OK


def _log_tail(console: Console, logs: Sequence[Path], lines: int = 15) -> None:
    """The last warnings of the operator and the agents (the demo's log is deleted with its directory; on the
    real cluster the operator process writes its own)."""
    for log in logs:
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        console.print(f"last lines of {log.name}:")
        for line in tail:
            console.print(f"  {line}", markup=False, highlight=False)


def _refresh(shown: Live, table: Callable[[], RenderableType], done: threading.Event) -> None:
    while not done.wait(0.25):
        try:
            shown.update(table())
        except Exception:  # a view only: an API server's moment of refusal (our client's errors, or the kubernetes
            continue  # client's on a real node) must not end the refresh; the next one shows it again


class _NoLive:
    def __enter__(self) -> Live:
        return None  # type: ignore[return-value]

    def __exit__(self, *exc: object) -> None:
        return None
