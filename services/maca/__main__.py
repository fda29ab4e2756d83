"""``metax-maca``: run the maca agent until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.maca import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("maca", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
