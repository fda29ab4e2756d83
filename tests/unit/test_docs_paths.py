"""The docs name today's paths: every repository path a doc names exists (issue 20, item 8).

Aspects: a path in backticks (``metax_core/node/cdi.py``, ``services/_agent/``), a file path in the text
(tests/integration/chart/test_helm_lifecycle.py), or a dotted module
(``metax_core.node.devices.settings_from_labels``) in the README, docs/ or the chart README names a file,
a directory or a module of this checkout. Seven docs still named modules from before the restructure
(``metax_core/spec.py``, ``metax_core/labels.py``, ...) when this test was written.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "charts" / "metax-operator" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUR_ROOTS = ("metax_core", "metax_hw", "metax_hw_fake", "metax_k8s", "services", "metax_dev", "tests", "benchmarks")

_ROOTS = "|".join(OUR_ROOTS)
_MODULE_ROOTS = "|".join(r for r in OUR_ROOTS if r != "tests")
QUOTED_PATH = re.compile(rf"`((?:{_ROOTS})/[A-Za-z0-9_./*-]*)`")
FILE_PATH = re.compile(rf"(?<![\w/.-])((?:{_ROOTS})/[A-Za-z0-9_./-]*\.(?:py|md|yaml|json|proto|sh|c|toml))\b")
DOTTED = re.compile(rf"`((?:{_MODULE_ROOTS})(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _paths(text: str) -> set[str]:
    found = set()
    for match in QUOTED_PATH.finditer(text):
        path = match.group(1).split("::")[0].rstrip(".")
        if "*" in path or "XXXX" in path:
            continue
        found.add(path)
    found.update(m.group(1) for m in FILE_PATH.finditer(text))
    return found


def _module_exists(dotted: str) -> bool:
    """``a.b.c.attr`` resolves: its longest prefix that is a module of ours defines the next name, if any."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ROOT.joinpath(*parts[:end])
        source = candidate.with_suffix(".py") if candidate.with_suffix(".py").is_file() else candidate / "__init__.py"
        if not source.is_file():
            continue
        if end == len(parts):
            return True
        name = re.escape(parts[end])
        defined = rf"(?m)^\s*(?:(?:async\s+)?def|class)\s+{name}\b|^{name}\s*[:=]|^(?:from|import)\s.*\b{name}\b"
        return re.search(defined, source.read_text(encoding="utf-8")) is not None
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_path_exists(doc: Path) -> None:
    missing = sorted(p for p in _paths(doc.read_text(encoding="utf-8")) if not (ROOT / p).exists())
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_module_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = sorted(m.rstrip(".") for m in DOTTED.findall(text) if not _module_exists(m.rstrip(".")))
    assert not missing, f"{doc.relative_to(ROOT)} names modules that do not exist: {missing}"


def test_the_check_sees_a_stale_path() -> None:
    assert _paths("see `metax_core/spec.py` and `services/_agent/`") == {"metax_core/spec.py", "services/_agent/"}
    assert _paths("(tests/integration/test_chart_e2e.py) runs") == {"tests/integration/test_chart_e2e.py"}
    assert not (ROOT / "metax_core/spec.py").exists()
    assert not _module_exists("metax_core.rollout_status")
    assert _module_exists("metax_core.node.devices.settings_from_labels")
    assert importlib.util.find_spec("metax_core.node.devices") is not None
