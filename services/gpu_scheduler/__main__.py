"""``metax-gpu-scheduler``: serve the kube-scheduler extender until SIGTERM or SIGINT.

Settings from the environment: ``METAX_SCHEDULER_PORT`` (default `extender.PORT`), ``METAX_LOG_LEVEL``;
the cluster from the in-cluster service account or ``$KUBECONFIG``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from metax_core.errors import MetaxError
from metax_core.topology import extender
from services._agent import cluster, loop
from services.gpu_scheduler import cache, server

log = logging.getLogger("gpu-scheduler")


def main(argv: list[str] | None = None) -> int:
    loop.parse_args(
        "gpu-scheduler",
        argv,
        description="The MetaX GPU operator's kube-scheduler extender (filter and prioritize by GPU topology).",
        doc="docs/scheduler.md",
    )
    environ = dict(os.environ)
    loop.setup_logging(environ)
    try:
        objects = cluster.production("gpu-scheduler", environ.get("POD_NAME", "gpu-scheduler")).objects
        port = int(environ.get("METAX_SCHEDULER_PORT", str(extender.PORT)))
        state = cache.Cache(objects)
        served = server.Server(state, port=port)
    except (MetaxError, ValueError, OSError) as exc:
        log.error("cannot start gpu-scheduler: %s", exc)
        return 2

    def run(stop: threading.Event) -> None:
        state.start(stop)
        served.start()
        log.info("gpu-scheduler extender listening on :%d", served.port)
        stop.wait()
        served.stop()

    loop.run_until_signalled(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
