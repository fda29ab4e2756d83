"""``metax-gpu-label``: run gpu-label until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.gpu_label import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("gpu-label", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
