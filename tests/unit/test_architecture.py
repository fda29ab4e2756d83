"""The hexagon's dependency rule, checked on the source: metax_core imports no adapter and no I/O library.

import-linter checks the same in `./run test`; this test keeps the rule visible in the suite and names the
offending line when it breaks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import metax_core

FORBIDDEN_ROOTS = {
    "metax_hw",
    "metax_hw_fake",
    "metax_k8s",
    "services",
    "metax_dev",
    "kubernetes",
    "sh",
    "subprocess",
    "pyroute2",
    "prometheus_client",
    "grpc",
    "socket",
    "urllib3",
    "requests",
    "os",
    "shutil",
    "time",
    "datetime.datetime.now",
}
# `datetime` types are fine (the rollout takes `now` as an argument); reading the clock is not.
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic"}


def _core_files() -> list[Path]:
    return sorted(Path(metax_core.__file__).parent.rglob("*.py"))


def test_core_imports_nothing_impure() -> None:
    offences = []
    for path in _core_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN_ROOTS:
                    offences.append(f"{path.name}:{node.lineno} imports {name}")
    assert offences == []


def test_core_never_reads_the_clock() -> None:
    offences = []
    for path in _core_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_CALLS:
                base = node.func.value
                if isinstance(base, ast.Name) and base.id in {"datetime", "date", "time"}:
                    offences.append(f"{path.name}:{node.lineno} calls {base.id}.{node.func.attr}()")
    assert offences == []
