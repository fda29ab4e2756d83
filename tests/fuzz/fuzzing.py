"""The fuzz suite's harness: a per-case watchdog, the budget, and the count of cases run (conftest.py
prints it).

A hang must fail, not be measured: `watchdog` arms a real-time timer around each case and raises `Hang`
(a BaseException, so no ``except Exception`` in the code under test can swallow it) when a case runs past
`CASE_SECONDS`. The budget is `EXAMPLES` hypothesis examples per test (``METAX_FUZZ_EXAMPLES``; CI runs the
short default, the long run is documented in README "Tests"). The number of cases run is printed at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

EXAMPLES = int(os.environ.get("METAX_FUZZ_EXAMPLES", "150"))
CASE_SECONDS = 20.0
CASES: dict[str, int] = {}


class Hang(BaseException):
    """A case ran longer than CASE_SECONDS."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hang(f"a fuzz case ran longer than {CASE_SECONDS} s")


@contextlib.contextmanager
def watchdog(name: str) -> Iterator[None]:
    """Run one case under the timer and count it under ``name``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    CASES[name] = CASES.get(name, 0) + 1
