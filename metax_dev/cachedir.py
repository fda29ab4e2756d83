"""Where the dev tooling keeps what it builds once: ``$XDG_CACHE_HOME/metax-operator/<name>`` (``~/.cache`` without
it), or the directory an override variable names (CI and tests point a build at a scratch cache that way)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(name: str, override: str | None = None) -> Path:
    """The cache directory of ``name``; ``override`` is the environment variable that replaces it when set."""
    chosen = os.environ.get(override) if override else None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "metax-operator" / name
