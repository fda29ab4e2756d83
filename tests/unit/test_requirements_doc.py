"""docs/requirements.md resolves every requirement id and seed section that the repository cites.

Aspects: every `R-…` id and component id `C1`–`C10` written anywhere in code, tests, docs or the chart is
defined in docs/requirements.md; every seed section (`§x.y`) and table (`Table x.y`) cited is listed there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "requirements.md"

REQUIREMENT = re.compile(r"\bR-[A-Z]+\b")
COMPONENT = re.compile(r"\bC(?:10|[1-9])\b")
SECTION = re.compile(r"§ ?(\d+(?:\.\d+)+)")
TABLE = re.compile(r"\bTable (\d+\.\d+(?:\.\d+)?)")


def _cited_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    suffixes = {".py", ".md", ".yaml", ".json", ".txt", ".tpl"}
    return [ROOT / f for f in listed if Path(f).suffix in suffixes and ROOT / f != DOC and (ROOT / f).is_file()]


def _cited(pattern: re.Pattern[str]) -> dict[str, str]:
    """Each citation → one file that makes it."""
    found: dict[str, str] = {}
    for path in _cited_files():
        for match in pattern.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(match.group(1) if pattern.groups else match.group(0), str(path.relative_to(ROOT)))
    return found


def _doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def _defined_ids() -> set[str]:
    """Ids in the first column of the doc's tables."""
    return {m.group(1) for m in re.finditer(r"^\| (R-[A-Z]+|C\d+) \|", _doc_text(), re.M)}


def test_every_requirement_and_component_id_cited_is_defined() -> None:
    defined = _defined_ids()
    cited = _cited(REQUIREMENT) | _cited(COMPONENT)
    missing = {cid: where for cid, where in cited.items() if cid not in defined}
    assert missing == {}, f"add these ids to docs/requirements.md: {missing}"


def test_every_seed_section_and_table_cited_is_listed() -> None:
    text = _doc_text()
    listed_sections = set(SECTION.findall(text))
    listed_tables = {t for row in re.findall(r"^\| (?:000 )?Tables? ([^|]+)\|", text, re.M) for t in _expand(row)}
    missing_sections = {s: w for s, w in _cited(SECTION).items() if s not in listed_sections}
    missing_tables = {t: w for t, w in _cited(TABLE).items() if t not in listed_tables}
    assert (missing_sections, missing_tables) == ({}, {})


def _expand(cell: str) -> set[str]:
    """'3.4, 3.5, 3.10' or '3.13–3.14' or '1.3.1' → the table numbers."""
    numbers: set[str] = set()
    for part in re.split(r",\s*", cell.strip()):
        bounds = re.findall(r"\d+\.\d+(?:\.\d+)?", part)
        if "–" in part and len(bounds) == 2:
            head, first = bounds[0].rsplit(".", 1)
            last = bounds[1].rsplit(".", 1)[1]
            numbers |= {f"{head}.{n}" for n in range(int(first), int(last) + 1)}
        else:
            numbers |= set(bounds)
    return numbers
