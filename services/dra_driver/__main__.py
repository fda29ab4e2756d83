"""``metax-dra-driver``: run the DRA driver until SIGTERM or SIGINT, then stop cleanly (sockets removed,
slices and prepared claims kept for the next start)."""

from __future__ import annotations

import os
import sys

# mx-smi runs as a child process while gRPC threads serve the kubelet (see services.gpu_device.__main__).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from services.dra_driver import bootstrap

main = bootstrap.RECIPE.main


if __name__ == "__main__":
    sys.exit(main())
