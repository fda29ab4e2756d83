"""``python -m metax_dev.controlplane``: see :mod:`metax_dev.controlplane.cli`."""

from __future__ import annotations

import sys

from metax_dev.controlplane import cli

if __name__ == "__main__":
    sys.exit(cli.main())
