"""`metax-operator-controller` (and `metax-operator run`): build the operator, run it until SIGTERM/SIGINT.

Why a module of its own: the composition root (`bootstrap`) imports the loop (`run`); the entry point sits
above both.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from metax_core.errors import MetaxError
from services.operator import bootstrap

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """`metax-operator-controller` (and `metax-operator run`): run until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        op = bootstrap.bootstrap()
    except MetaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        op.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    op.start()
    op.wait()
    op.stop()
    return 0
