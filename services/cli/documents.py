"""What every `metax-operator` command shares: exit codes, the input document, and printing refusals.

Why a module of its own: each command module (`main`, `rollout`) reads a document and reports errors the
same way; keeping it here lets them import it without importing each other.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from metax_core.errors import InvalidSpec, MetaxError
from metax_core.spec import text
from metax_core.wire import meta

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


class UsageError(MetaxError):
    """A command-line input problem that is not a spec field (missing file, unreadable YAML)."""


class DocumentError(UsageError):
    """Unreadable input text; its message is already one ``file:line:column: message`` line."""


def error_line(exc: UsageError) -> str:
    """How the CLI prints a usage problem: one line, positions first when the text had them."""
    return str(exc) if isinstance(exc, DocumentError) else f"error: {exc}"


def package_version() -> str:
    try:
        return metadata.version(meta.PRODUCT)
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def read_input(path: str, *, max_bytes: int = text.MAX_BYTES) -> bytes | str:
    """The bytes of ``path`` (``-`` reads stdin), never more than ``max_bytes`` + 1 of them (``/dev/zero``)."""
    try:
        if path == "-":
            binary = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests, embedding) has none
            return binary.read(max_bytes + 1) if binary is not None else sys.stdin.read(max_bytes + 1)
        with Path(path).open("rb") as stream:
            return stream.read(max_bytes + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def load_document(path: str) -> Any:
    """One YAML or JSON document from ``path`` (``-`` reads stdin), through the core's safe loader
    (`metax_core.spec.text`: size, depth and alias limits, UTF-8, string keys)."""
    source = "<stdin>" if path == "-" else path
    try:
        return text.load_document(read_input(path), source)
    except text.TextError as exc:
        raise DocumentError(str(exc)) from exc


def print_errors(errors: InvalidSpec) -> None:
    for error in errors.errors:
        print(str(error), file=sys.stderr)


class PlainDumper(yaml.SafeDumper):
    """Prints repeated mappings in full instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
