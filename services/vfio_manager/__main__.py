"""``metax-vfio-manager``: run vfio-manager until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

from services.vfio_manager import bootstrap

main = bootstrap.RECIPE.main


if __name__ == "__main__":
    sys.exit(main())
