"""The guest's results as the host sees them: ``@@RK <json>`` console lines parsed into records.

Why a module of its own: the session fixture builds a `GuestRun` and the tests read it; both import it from
here (a conftest is not a module to import from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from tests.realkernel import vm


@attrs.frozen
class GuestRun:
    boot: vm.Boot
    records: list[dict[str, Any]]
    workdir: Path
    payload_error: str | None = None
    """Why the test payloads could not be built (their cases then fail with it)."""

    @property
    def payload_cases(self) -> dict[str, dict[str, Any]]:
        return {r["payload_case"]: r for r in self.records if "payload_case" in r}

    @property
    def cases(self) -> dict[str, dict[str, Any]]:
        return {r["case"]: r for r in self.records if "case" in r}

    def first(self, key: str) -> Any:
        return next((r[key] for r in self.records if key in r), None)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.boot.console.splitlines()[-lines:])


def parse(console: str) -> list[dict[str, Any]]:
    records = []
    for line in console.splitlines():
        start = line.find(vm.MARKER)
        if start < 0:
            continue
        try:
            record = json.loads(line[start + len(vm.MARKER) :])
        except ValueError:
            continue  # a kernel message cut into the line: that record is lost, its test says so
        if isinstance(record, dict):
            records.append(record)
    return records
