"""``metax-maca``: run the maca agent until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services.maca import bootstrap

main = bootstrap.RECIPE.main


if __name__ == "__main__":
    sys.exit(main())
