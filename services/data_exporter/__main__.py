"""``metax-data-exporter``: sample the GPUs and serve ``/metrics`` until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services._agent import loop
from services.data_exporter import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("data-exporter", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
