"""``metax-topo-worker``: run topo-worker until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services.topo_worker import bootstrap

main = bootstrap.RECIPE.main


if __name__ == "__main__":
    sys.exit(main())
