"""``python -m metax_dev.demo``."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from metax_dev.demo import cli  # noqa: E402

sys.exit(cli.main())
