"""``metax-container-runtime-agent``: run container-runtime until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services.container_runtime import bootstrap

main = bootstrap.RECIPE.main


if __name__ == "__main__":
    sys.exit(main())
