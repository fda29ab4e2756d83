"""``python -m benchmarks --only P4 --quick`` as a user runs it (issue 26 item 4): the cheapest figure, pure.

Aspects: the command exits 0 and prints one table whose P4 row has a measured number in ms and a verdict of
met or missed (the goal was checked, not skipped); without ``--write`` it leaves benchmarks/RESULTS.md as it
was.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


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
