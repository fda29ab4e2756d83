"""``metax-data-exporter``: sample the GPUs and serve ``/metrics`` until SIGTERM or SIGINT."""

from __future__ import annotations

import os
import sys

# mx-smi runs as a child process while this process calls the kubelet over gRPC; gRPC's fork handlers are of
# no use there (the child execs at once) and can abort a child forked mid-call. Set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from services.data_exporter import bootstrap

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter (malloc.h)."""
MMAP_THRESHOLD = 128 * 1024
"""glibc's default threshold, kept fixed."""


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold at its default. glibc raises it whenever a block it had mmap'ed is freed; the
    `sh` library reads each child's exit pipe into a 1 MiB buffer, so after the first mx-smi run such blocks come
    from the heap and about 1 MiB stays resident (the exporter's RSS goal, docs/exporter.md). False when the C
    library is not glibc (nothing to tune)."""
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    pin_mmap_threshold()
    return bootstrap.RECIPE.main(argv)


if __name__ == "__main__":
    sys.exit(main())
