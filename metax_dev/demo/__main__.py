"""``python -m metax_dev.demo`` (what ``./run demo`` runs)."""

from __future__ import annotations

import sys

from metax_dev.demo import cli

sys.exit(cli.main())
