"""``metax-topo-worker``: run topo-worker until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.topo_worker import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("topo-worker", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
