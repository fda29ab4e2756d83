"""``metax-data-exporter``: sample the GPUs and serve ``/metrics`` until SIGTERM or SIGINT."""

from __future__ import annotations

import os
import sys

# mx-smi runs as a child process while this process calls the kubelet over gRPC; gRPC's fork handlers are of
# no use there (the child execs at once) and can abort a child forked mid-call. Set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from services._agent import loop
from services.data_exporter import bootstrap


def main(argv: list[str] | None = None) -> int:
    return loop.main("data-exporter", bootstrap.build, argv)


if __name__ == "__main__":
    sys.exit(main())
