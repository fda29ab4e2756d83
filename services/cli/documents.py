"""What every `metax-operator` command shares: exit codes, the input document, and printing refusals and failures.

Why a module of its own: each command module (`main`, `rollout`) reads a document and reports errors the
same way; keeping it here lets them import it without importing each other.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from metax_core import release
from metax_core.errors import InvalidSpec, MetaxError
from metax_core.spec import text

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

USAGE_ERROR = "usage"
"""The ``error`` of the JSON error document (`print_failure`) for bad input: a file, an option, a node name."""
CLUSTER_OPERATOR = "one ClusterOperator, or its spec alone (a values file: the chart's values)"
"""What ``validate``, ``render``, ``diff -f`` and ``rollout plan -f`` read (`load_document`'s default)."""
LISTED_DOCUMENTS = 5


class UsageError(MetaxError):
    """A command-line input problem that is not a spec field (missing file, unreadable YAML)."""


class DocumentError(UsageError):
    """Unreadable input text; its message is already one ``file:line:column: message`` line."""


def error_line(exc: UsageError) -> str:
    """How the CLI prints a usage problem: one line, positions first when the text had them."""
    return str(exc) if isinstance(exc, DocumentError) else f"error: {exc}"


def package_version() -> str:
    return release.running()


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


def load_document(path: str, expected: str = CLUSTER_OPERATOR) -> Any:
    """One YAML or JSON document from ``path`` (``-`` reads stdin), through the core's safe loader
    (`metax_core.spec.text`: size, depth and alias limits, UTF-8, string keys). Not one: a DocumentError that
    names the file, says what its documents are and what the command expects (``expected``)."""
    source = "<stdin>" if path == "-" else path
    try:
        documents = text.load_all(read_input(path), source)
    except text.TextError as exc:
        raise DocumentError(str(exc)) from exc
    if len(documents) != 1:
        found = f" ({describe(documents)})" if documents else ""
        raise DocumentError(
            f"{source}: must hold exactly one document, found {len(documents)}{found}; expected {expected}"
        )
    return documents[0]


def describe(documents: Sequence[Any]) -> str:
    """What documents are, for a message: ``Pod train, ConfigMap driver-config, a mapping without kind``."""
    shown = [_described(d) for d in documents[:LISTED_DOCUMENTS]]
    more = len(documents) - LISTED_DOCUMENTS
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _described(document: Any) -> str:
    if not isinstance(document, dict):
        return "a list" if isinstance(document, list) else f"the value {str(document)[:40]!r}"
    kind, metadata = document.get("kind"), document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(kind, str) or not kind:
        return "a mapping without kind"
    return f"{kind} {name}" if isinstance(name, str) and name else kind


def print_failure(error: str, message: str, *, json_output: bool = False) -> None:
    """How a command reports a failure: ``error: message`` on stderr, or, for a command asked for ``-o json``,
    ``{"error": error, "message": message}`` on stdout (every outcome parses; ``error`` names what failed:
    `USAGE_ERROR`, or `services.cli.connection`'s kubeconfig / api-server)."""
    if json_output:
        print(json.dumps({"error": error, "message": message}, indent=2))
    else:
        print(f"error: {message}", file=sys.stderr)


def print_usage_error(exc: UsageError, *, json_output: bool = False) -> None:
    """A usage problem: `error_line` on stderr, or `print_failure`'s JSON document."""
    if json_output:
        print_failure(USAGE_ERROR, str(exc), json_output=True)
    else:
        print(error_line(exc), file=sys.stderr)


def print_errors(errors: InvalidSpec) -> None:
    for error in errors.errors:
        print(str(error), file=sys.stderr)


class PlainDumper(yaml.SafeDumper):
    """Prints repeated mappings in full instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
