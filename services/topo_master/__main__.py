"""``metax-topo-master``: keep the cluster's topology view until SIGTERM or SIGINT.

Settings from the environment: ``METAX_NAMESPACE`` (where the ConfigMap lives; default the pod's service
account namespace, else ``metax-operator``), ``METAX_LOG_LEVEL``; the cluster from the in-cluster service
account or ``$KUBECONFIG``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Mapping

from metax_core.cluster import pod_security
from metax_core.wire import agent_env
from services._agent import cluster, service
from services.topo_master import master

SA_NAMESPACE = pathlib.Path(pod_security.TOKEN_PATH) / "namespace"


def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
    """The topology view's keeper on the cluster; MetaxError when the cluster cannot be reached."""
    namespace = environ.get(agent_env.NAMESPACE) or (
        SA_NAMESPACE.read_text().strip() if SA_NAMESPACE.is_file() else "metax-operator"
    )
    ports = cluster.production("topo-master", environ.get("POD_NAME", "topo-master"))
    return master.TopoMaster(ports.objects, ports.events, namespace).run


main = service.Service(
    "topo-master",
    start,
    description="The MetaX GPU operator's topology view: one ConfigMap rebuilt from every node's topology.",
    doc="docs/topology.md",
).main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
