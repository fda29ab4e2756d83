"""The tests mirror the tree (issue 43 item 6).

Two rules, each checked over every file it concerns so that a failure lists them all:

- ``tests/unit`` is the core's: its modules import ``metax_core``, the test support (``tests.support``, itself
  checked the same way, and their own helper modules) and third-party libraries, never an adapter, a service,
  the dev tooling or the benchmarks. Why: a unit test is then fast and hermetic by construction, and the folder
  a test lives in says which layer it exercises (``tests/hw``, ``tests/k8s``, ``tests/services``, ``tests/dev``,
  ``tests/benchmarks`` for the others).
- No prefix family: no ``test_<folder>_*.py`` inside a folder named ``<folder>`` (at any depth under
  ``tests/``), e.g. ``tests/unit/rollout/test_plan.py`` is ``tests/unit/rollout/test_plan.py``. The
  folder already says it; the prefix was a second, drifting spelling of it.

Run alone: ``pytest -q tests/unit/test_test_layout.py``. When it was written both rules failed (15 modules in
tests/unit imported adapters, 43 files carried their folder's prefix); the moves are in git's history.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"
OUTSIDE_UNIT = ("metax_hw", "metax_hw_fake", "metax_k8s", "services", "metax_dev", "benchmarks")
"""First-party roots a unit test must not import (``metax_core`` is the one it may)."""
TEST_SUPPORT = ("tests.support", "tests.unit")


def imported_modules(source: str) -> set[str]:
    """Every absolute module an import statement names (at any depth: a function's import counts too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(f"{r}.") for r in roots)


def _support_file(module: str) -> Path | None:
    """The file of a ``tests.…`` module (a module or a package's ``__init__``), if it exists."""
    base = TESTS.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def forbidden_imports(path: Path, seen: set[Path] | None = None) -> list[str]:
    """What ``path`` imports that a unit test may not, directly or through the test support it imports."""
    seen = set() if seen is None else seen
    seen.add(path)
    found = []
    for module in sorted(imported_modules(path.read_text(encoding="utf-8"))):
        outside_support = module == "tests" or (module.startswith("tests.") and not _within(module, TEST_SUPPORT))
        if _within(module, OUTSIDE_UNIT) or outside_support:
            found.append(module)
        elif _within(module, TEST_SUPPORT) and (support := _support_file(module)) and support not in seen:
            found.extend(f"{m} (through {module})" for m in forbidden_imports(support, seen))
    return found


def prefix_family(path: Path) -> str | None:
    """The folder whose name ``path`` repeats as its prefix (``test_<folder>_…``), if any."""
    for folder in path.parent.relative_to(TESTS).parts:
        if path.name.startswith(f"test_{folder}_"):
            return folder
    return None


def test_unit_tests_import_only_the_core_the_test_support_and_third_party_libraries() -> None:
    offenders = {
        str(p.relative_to(TESTS.parent)): bad for p in sorted(UNIT.rglob("*.py")) if (bad := forbidden_imports(p))
    }
    assert not offenders, (
        "tests/unit imports only metax_core, tests.support and third-party libraries; move these tests to the "
        "folder of what they test (tests/hw, tests/k8s, tests/services, tests/dev, tests/benchmarks, ...):\n"
        + "\n".join(f"  {path}: {', '.join(bad)}" for path, bad in offenders.items())
    )


def test_no_test_file_repeats_its_folder_as_a_prefix() -> None:
    offenders = {
        str(p.relative_to(TESTS.parent)): folder
        for p in sorted(TESTS.rglob("test_*.py"))
        if (folder := prefix_family(p))
    }
    assert not offenders, (
        "drop the folder's name from these test files (tests/x/test_x_y.py -> tests/x/test_y.py):\n"
        + ("\n".join(f"  {path} (in {folder}/)" for path, folder in offenders.items()))
    )


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    source = (
        "import yaml\nfrom metax_core import spec\ndef f():\n    from metax_k8s import crd\nfrom . import sibling\n"
    )
    assert imported_modules(source) == {"yaml", "metax_core", "metax_k8s"}
    module = tmp_path / "test_x.py"
    module.write_text(source + "import services.cli\nfrom tests.integration import helpers\nimport tests.support\n")
    assert forbidden_imports(module) == ["metax_k8s", "services.cli", "tests.integration"]
    assert prefix_family(TESTS / "unit" / "rollout" / "test_rollout_plan.py") == "rollout"
    assert prefix_family(TESTS / "contract" / "cluster" / "test_contract_watch.py") == "contract"
    assert prefix_family(TESTS / "unit" / "rollout" / "test_plan.py") is None
    assert prefix_family(TESTS / "services" / "test_cli_rollout.py") is None
