"""``metax-gpu-scheduler``: serve the kube-scheduler extender until SIGTERM or SIGINT.

Settings from the environment: ``METAX_SCHEDULER_PORT`` (default `extender.PORT`), ``METAX_LOG_LEVEL``;
the cluster from the in-cluster service account or ``$KUBECONFIG``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Mapping

from metax_core.errors import MetaxError
from metax_core.topology import extender
from services._agent import cluster, service
from services.gpu_scheduler import cache, server

log = logging.getLogger("gpu-scheduler")


def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
    """The extender's cache and its HTTP server (bound here: a port in use refuses the start)."""
    objects = cluster.production("gpu-scheduler", environ.get("POD_NAME", "gpu-scheduler")).objects
    port = int(environ.get("METAX_SCHEDULER_PORT", str(extender.PORT)))
    state = cache.Cache(objects)
    served = server.Server(state, port=port)

    def run(stop: threading.Event) -> None:
        state.start(stop)
        served.start()
        log.info("gpu-scheduler extender listening on :%d", served.port)
        stop.wait()
        served.stop()

    return run


main = service.Service(
    "gpu-scheduler",
    start,
    description="The MetaX GPU operator's kube-scheduler extender (filter and prioritize by GPU topology).",
    doc="docs/scheduler.md",
    refused=(MetaxError, ValueError, OSError),
).main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
