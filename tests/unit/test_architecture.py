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


# -- services/ keeps no raw host writes (issue 43): host files go through the ports in metax_core/ports/node.py --

RAW_WRITE_CALLS = {
    "os": {
        "replace",
        "rename",
        "renames",
        "remove",
        "unlink",
        "makedirs",
        "mkdir",
        "rmdir",
        "removedirs",
        "chmod",
        "chown",
        "lchown",
        "symlink",
        "link",
        "truncate",
        "mkfifo",
        "mknod",
    },
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "rmtree", "chown", "copymode", "copystat"},
}
PATH_WRITES = {
    "write_text",
    "write_bytes",
    "mkdir",
    "unlink",
    "rename",
    "chmod",
    "lchmod",
    "touch",
    "rmdir",
    "symlink_to",
    "hardlink_to",
}
"""Methods of `pathlib.Path` that write; ``replace`` is one too, told apart from `str.replace` by its one argument."""
IMPURE_MODULES = {"tempfile", "shutil"}
HOST_WRITE_EXCEPTIONS = {
    "webhook/server.py": "the webhook's serving key and certificate in a private temporary directory of its own "
    "process (ssl.SSLContext.load_cert_chain reads files only); nothing on the host, removed at shutdown",
}
"""Files of services/ that may write files, and why: each entry is not host state another process reads."""


def _services_files() -> list[Path]:
    return sorted((Path(metax_core.__file__).parent.parent / "services").rglob("*.py"))


def _write_mode(call: ast.Call, position: int) -> bool:
    """Whether ``open``'s mode argument (at ``position`` or ``mode=``) writes."""
    mode: ast.expr | None = call.args[position] if len(call.args) > position else None
    mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


def _raw_writes(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, f"imports {n}") for n in names if n.split(".")[0] in IMPURE_MODULES]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open" and _write_mode(node, 1):
            found.append((node.lineno, "open(..., write mode)"))
        if not isinstance(func, ast.Attribute):
            continue
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if owner in RAW_WRITE_CALLS and func.attr in RAW_WRITE_CALLS[owner]:
            found.append((node.lineno, f"{owner}.{func.attr}"))
        elif owner is None or owner not in RAW_WRITE_CALLS:
            if func.attr in PATH_WRITES or (func.attr == "replace" and len(node.args) == 1 and not node.keywords):
                found.append((node.lineno, f".{func.attr}()"))
            elif func.attr == "open" and _write_mode(node, 0):
                found.append((node.lineno, ".open(write mode)"))
    return found


def test_services_write_no_host_file_but_through_a_port() -> None:
    services = Path(metax_core.__file__).parent.parent / "services"
    offences = []
    for path in _services_files():
        relative = str(path.relative_to(services))
        if relative in HOST_WRITE_EXCEPTIONS:
            continue
        for line, what in _raw_writes(ast.parse(path.read_text(), str(path))):
            offences.append(f"services/{relative}:{line} {what}")
    assert offences == []


def test_the_host_write_check_finds_each_kind_of_write() -> None:
    source = """
import os, shutil, tempfile, pathlib
os.replace(a, b); os.makedirs(d); os.chmod(p, 0o600); shutil.rmtree(d)
open(p, "w"); open(p, mode="ab"); open(p); open(p, "rb")
path.write_text("x"); path.mkdir(); path.unlink(); path.replace(other); path.touch()
text.replace("a", "b"); path.open("wb"); path.open()
"""
    found = [what for _, what in _raw_writes(ast.parse(source))]
    assert found == [
        "imports shutil", "imports tempfile",
        "os.replace", "os.makedirs", "os.chmod", "shutil.rmtree",
        "open(..., write mode)", "open(..., write mode)",
        ".write_text()", ".mkdir()", ".unlink()", ".replace()", ".touch()",
        ".open(write mode)",
    ]  # fmt: skip


def test_every_exception_to_the_host_write_check_still_writes() -> None:
    services = Path(metax_core.__file__).parent.parent / "services"
    for relative in HOST_WRITE_EXCEPTIONS:
        assert _raw_writes(ast.parse((services / relative).read_text())), f"{relative} no longer writes: drop it"
