"""``metax-gpu-scheduler``: serve the extender until SIGTERM or SIGINT.

Settings from the environment: ``METAX_SCHEDULER_PORT`` (default `extender.PORT`), ``METAX_LOG_LEVEL``;
the cluster from the in-cluster service account or ``$KUBECONFIG``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from metax_core.topology import extender
from services.gpu_scheduler import cache, server


def main(argv: list[str] | None = None) -> int:
    from services._agent import cluster

    logging.basicConfig(
        level=os.environ.get("METAX_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    state = cache.Cache(cluster.production("gpu-scheduler", os.environ.get("POD_NAME", "gpu-scheduler")).objects)
    state.start(stop)
    port = int(os.environ.get("METAX_SCHEDULER_PORT", str(extender.PORT)))
    served = server.Server(state, port=port).start()
    logging.getLogger(__name__).info("gpu-scheduler extender listening on :%d", served.port)
    stop.wait()
    served.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
