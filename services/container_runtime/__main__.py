"""``metax-container-runtime-agent``: run container-runtime until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.container_runtime import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("container-runtime", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
