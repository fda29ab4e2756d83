"""``metax-driver-manager``: run driver-manager until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.driver_manager import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("driver-manager", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
