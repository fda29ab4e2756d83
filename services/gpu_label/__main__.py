"""``metax-gpu-label``: run gpu-label until SIGTERM or SIGINT; ``metax-gpu-discovery``: run gpu-discovery."""

from __future__ import annotations

import sys

from services._agent import loop
from services.gpu_label import bootstrap, discovery


def main(argv: list[str] | None = None) -> int:
    return loop.main("gpu-label", bootstrap.build, argv)


def discover(argv: list[str] | None = None) -> int:
    """gpu-label's unprivileged half on every node (`services.gpu_label.discovery`)."""
    return loop.main(discovery.COMPONENT, discovery.RECIPE.build, argv)


if __name__ == "__main__":
    sys.exit(main())
