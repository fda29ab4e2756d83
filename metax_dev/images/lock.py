"""``images/requirements.lock``: every runtime dependency of the distribution, pinned to what this venv has.

Why: the images install exactly these versions (the versions the tests ran with), so a rebuild next month
makes the same image; regenerate with ``./run images --lock`` after changing pyproject.toml's dependencies.
"""

from __future__ import annotations

import importlib.metadata
import re

from packaging.requirements import Requirement

from metax_core.wire import meta
from metax_dev.images import definitions

DISTRIBUTION = meta.PRODUCT
HEADER = (
    "# Every runtime dependency of metax-gpu-operator, pinned: the images install exactly these (metax_dev/images).\n"
    "# Regenerate with `./run images --lock` after changing pyproject.toml's dependencies.\n"
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(distribution: str = DISTRIBUTION) -> dict[str, str]:
    """The runtime dependency closure of `distribution` (no extras) with the installed versions."""
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in importlib.metadata.requires(distribution) or []]
    while todo:
        req = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = _canonical(req.name)
        if name in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[name] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return dict(sorted(seen.items()))


def render(distribution: str = DISTRIBUTION) -> str:
    return HEADER + "".join(f"{name}=={ver}\n" for name, ver in pins(distribution).items())


def write() -> None:
    defs = definitions.load()
    defs.app.lock.write_text(render())
