"""README's layout table is the tree (issue 43 item 6): a row for every top-level directory and every
``services/`` package, and no row for anything else.

Why a test: the table is where a new contributor looks first for where a thing lives, and it drifted (it
listed 7 of the 15 service packages when this test was written). A package added without its row, or a row
left behind by a move, fails here with the rows to add or remove.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \|$")


def layout_rows(text: str) -> dict[str, str]:
    """The layout table's first-column paths -> their purpose (the rows of the ``## Layout`` section)."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := ROW.match(line):
            rows[match.group(1)] = match.group(2).strip()
    return rows


def _ignored(name: str) -> bool:
    """Hidden directories and what .gitignore leaves out (the virtualenv, build output, caches)."""
    patterns = [p.strip().rstrip("/") for p in (ROOT / ".gitignore").read_text().splitlines() if p.strip()]
    return name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in patterns if not p.startswith("#"))


def tree_paths(root: Path = ROOT) -> set[str]:
    """Every top-level directory and every ``services/`` package, as the table spells them (``name/``)."""
    top = {f"{d.name}/" for d in root.iterdir() if d.is_dir() and not _ignored(d.name)}
    services = {f"services/{d.name}/" for d in (root / "services").iterdir() if (d / "__init__.py").is_file()}
    return top | services


def test_the_layout_table_lists_every_top_level_directory_and_service_package_and_nothing_else() -> None:
    rows = layout_rows(README.read_text(encoding="utf-8"))
    on_disk = tree_paths()
    missing, stale = sorted(on_disk - rows.keys()), sorted(rows.keys() - on_disk)
    assert not missing and not stale, (
        f"README.md's Layout table differs from the tree: add a row (`path/` | one-line purpose) for {missing}; "
        f"remove or rename the rows {stale}"
    )


def test_every_row_says_what_its_directory_is_for() -> None:
    rows = layout_rows(README.read_text(encoding="utf-8"))
    assert all(len(purpose.split()) >= 4 for purpose in rows.values()), rows


def test_the_parser_reads_the_rows_of_the_layout_section_only() -> None:
    text = (
        "# X\n\n## Layout\n\n| path | what |\n|---|---|\n| `a/` | the a things |\n| `services/b/` | b | c |\n"
        "\n## Other\n\n| `z/` | not layout |\n"
    )
    assert layout_rows(text) == {"a/": "the a things", "services/b/": "b | c"}
    assert "services/operator/" in tree_paths() and "metax_core/" in tree_paths()
    assert not {".venv/", "build/", "__pycache__/", "services/__pycache__/"} & tree_paths()
