"""A benchmark module that never finishes unless interrupted (test_command's timeout test):
``figures`` says when it starts and, on the way out, that it cleaned up."""

from __future__ import annotations

import time
from collections.abc import Sequence

from benchmarks import figures as fig


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    print("started", flush=True)
    try:
        time.sleep(3600)
    finally:
        print("cleaned up", flush=True)
    return []
