"""``metax-gpu-device``: run the gpu-device agent until SIGTERM or SIGINT, then stop cleanly."""

from __future__ import annotations

import os
import sys

# mx-smi runs as a child process while gRPC threads serve kubelet; gRPC's fork handlers are of no use
# there (the child execs at once) and log a line per fork. Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from services._agent import loop
from services.gpu_device import bootstrap
from services.gpu_device.agent import Agent

main = bootstrap.RECIPE.main


def run_until_signalled(agent: Agent) -> None:
    """Run ``agent`` in this (main) thread until SIGTERM or SIGINT, then restore the previous handlers."""
    loop.run_until_signalled(agent.run)


if __name__ == "__main__":
    sys.exit(main())
