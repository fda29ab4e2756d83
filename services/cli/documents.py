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

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


class UsageError(MetaxError):
    """A command-line input problem that is not a spec field (missing file, unreadable YAML)."""


def package_version() -> str:
    try:
        return metadata.version("metax-gpu-operator")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def load_document(path: str) -> Any:
    """One YAML or JSON document from ``path`` (``-`` reads stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML or JSON: {exc}") from exc
    if len(documents) != 1:
        raise UsageError(f"{path} must hold exactly one document, found {len(documents)}")
    return documents[0]


def print_errors(errors: InvalidSpec) -> None:
    for error in errors.errors:
        print(str(error), file=sys.stderr)


class PlainDumper(yaml.SafeDumper):
    """Prints repeated mappings in full instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
