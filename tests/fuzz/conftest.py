"""Prints how many fuzz cases ran (counted by `fuzzing.watchdog`)."""

from __future__ import annotations

import pytest
from fuzzing import CASES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CASES:
        terminalreporter.section("fuzz cases run")
        for name, count in sorted(CASES.items()):
            terminalreporter.write_line(f"{count:8d}  {name}")
        terminalreporter.write_line(f"{sum(CASES.values()):8d}  total")
