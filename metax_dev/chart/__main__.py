"""``python -m metax_dev.chart [--write]``: list the stale generated chart files, or write them."""

from __future__ import annotations

import sys

from metax_dev.chart.generate import main

sys.exit(main())
