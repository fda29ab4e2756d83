"""``metax-gpu-label``: run gpu-label until SIGTERM or SIGINT; ``metax-gpu-discovery``: run gpu-discovery."""

from __future__ import annotations

import sys

from services.gpu_label import bootstrap, discovery

main = bootstrap.RECIPE.main
discover = discovery.RECIPE.main
"""gpu-label's unprivileged half on every node (`services.gpu_label.discovery`)."""


if __name__ == "__main__":
    sys.exit(main())
