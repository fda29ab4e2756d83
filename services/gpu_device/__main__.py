"""``metax-gpu-device``: run the gpu-device agent until SIGTERM or SIGINT, then stop cleanly."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

# mx-smi runs as a child process while gRPC threads serve kubelet; gRPC's fork handlers are of no use
# there (the child execs at once) and log a line per fork. Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from metax_core.errors import MetaxError
from services.gpu_device import bootstrap
from services.gpu_device.agent import Agent

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("METAX_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        agent = bootstrap.bootstrap()
    except MetaxError as exc:
        log.error("cannot start gpu-device: %s", exc)
        return 2
    run_until_signalled(agent)
    return 0


def run_until_signalled(agent: Agent) -> None:
    """Run ``agent`` in this (main) thread until SIGTERM or SIGINT, then restore the previous handlers."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        agent.run(stop)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
