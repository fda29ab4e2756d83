"""The tests' one way to wait for something: poll a check until it gives a truthy value, or fail saying what.

Why one: the operator, process-node, chart, agents and control-plane tests had their own copies with their
own messages and error handling. Here a check's ClusterError counts as "not yet" (an API server that is
restarting, an object not created yet); any other exception is a bug in the test or the product and is raised
at once. Waits are bounded and the failure names what was awaited and the last value seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from metax_core.errors import ClusterError


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy (ClusterError counts as not yet); that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except ClusterError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
