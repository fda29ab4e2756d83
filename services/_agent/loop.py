"""Running a node agent: ticks until SIGTERM, chores that come due on an injectable clock, and saying once.

Why here: every agent is the same loop around a different step. `Chores` answers "has this chore come due?"
on a clock the tests move by hand (no sleeps); `Say` logs a message only when it differs from the last one
on its topic, so INFO lines say what changed, not what repeats; `serve` runs ticks until a stop event, woken
early by a watch; `main` is an agent's ``__main__`` on the shared process skeleton (`services._agent.service`:
``--help``/``--version``, logging, settings errors → exit 2, SIGTERM/SIGINT → a clean shutdown).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from metax_core.errors import MetaxError
from services._agent import service
from services._agent.service import run_until_signalled as run_until_signalled
from services._agent.service import setup_logging as setup_logging


class Agent(Protocol):
    """What the skeleton runs: one gather → decide → act → publish round, and a clean stop."""

    name: str

    def tick(self) -> None: ...

    def shutdown(self) -> None: ...


class Chores:
    """When each periodic chore is due next, on ``clock`` (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._next: dict[str, float] = {}

    def due(self, chore: str, interval: float, now: float | None = None) -> bool:
        """True (and schedule the next run ``interval`` later) when ``chore`` has come due."""
        now = self.clock() if now is None else now
        if now < self._next.get(chore, float("-inf")):
            return False
        self._next[chore] = now + interval
        return True

    def soon(self, chore: str) -> None:
        """Make ``chore`` due at the next look (a watch saw a change)."""
        self._next.pop(chore, None)

    def later(self, chore: str, delay: float, now: float | None = None) -> None:
        """Push ``chore`` back to ``delay`` from now (a back-off after a failure)."""
        self._next[chore] = (self.clock() if now is None else now) + delay

    def next_at(self, chore: str) -> float | None:
        return self._next.get(chore)


class Say:
    """Log a message only when it differs from the last one on its topic."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._said: dict[str, str] = {}

    def __call__(self, topic: str, message: str, level: int = logging.INFO) -> bool:
        if self._said.get(topic) == message:
            return False
        self._said[topic] = message
        self.logger.log(level, "%s", message)
        return True

    def forget(self, topic: str) -> None:
        self._said.pop(topic, None)


def backoff(failures: int, *, base: float = 5.0, cap: float = 300.0) -> float:
    """Seconds to wait after ``failures`` failures in a row: 5, 10, 20, ... up to 5 minutes."""
    return float(min(cap, base * (2 ** max(0, failures - 1))))


def serve(agent: Agent, stop: threading.Event, *, tick: float, wake: threading.Event | None = None) -> None:
    """Tick until ``stop`` is set; sleep ``tick`` seconds between rounds unless ``wake`` is set sooner."""
    log = logging.getLogger(type(agent).__module__)
    try:
        while not stop.is_set():
            try:
                agent.tick()
            except MetaxError as exc:  # a round that failed is retried on the next one, never a crash loop
                log.error("%s: %s", agent.name, exc)
            if wake is None:
                stop.wait(tick)
            else:
                deadline = time.monotonic() + tick
                while not stop.is_set() and not wake.is_set() and (left := deadline - time.monotonic()) > 0:
                    wake.wait(min(left, 0.2))
                wake.clear()
    finally:
        agent.shutdown()


def main(
    name: str,
    build: Callable[[Mapping[str, str]], tuple[Agent, Callable[[threading.Event], None]]],
    argv: Sequence[str] | None = None,
) -> int:
    """The ``__main__`` of an agent: build it from the environment, run it until signalled (`service.Service`)."""
    return service.Service(name, lambda environ, args: build(environ)[1]).main(argv)
