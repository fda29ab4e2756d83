"""``metax-topo-master``: keep the cluster's topology view until SIGTERM or SIGINT.

Settings from the environment: ``METAX_NAMESPACE`` (where the ConfigMap lives; default the pod's service
account namespace, else ``metax-operator``), ``METAX_LOG_LEVEL``; the cluster from the in-cluster service
account or ``$KUBECONFIG``.
"""

from __future__ import annotations

import logging
import os
import pathlib
import sys

from metax_core.errors import MetaxError
from services._agent import cluster, loop
from services.topo_master import master

log = logging.getLogger("topo-master")
SA_NAMESPACE = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def main(argv: list[str] | None = None) -> int:
    loop.parse_args(
        "topo-master",
        argv,
        description="The MetaX GPU operator's topology view: one ConfigMap rebuilt from every node's topology.",
        doc="docs/topology.md",
    )
    environ = dict(os.environ)
    loop.setup_logging(environ)
    namespace = environ.get("METAX_NAMESPACE") or (
        SA_NAMESPACE.read_text().strip() if SA_NAMESPACE.is_file() else "metax-operator"
    )
    try:
        ports = cluster.production("topo-master", environ.get("POD_NAME", "topo-master"))
    except MetaxError as exc:
        log.error("cannot start topo-master: %s", exc)
        return 2
    loop.run_until_signalled(master.TopoMaster(ports.objects, ports.events, namespace).run)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
