"""``python -m metax_dev.realnode``: see :mod:`metax_dev.realnode.cli`."""

from __future__ import annotations

import sys

from metax_dev.realnode import cli

if __name__ == "__main__":
    sys.exit(cli.main())
