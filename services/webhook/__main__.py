"""``metax-operator-webhook``: the webhook alone, for when it runs apart from the operator's reconcile loop.

The operator process starts the same server itself (`services.webhook.server.serve`); this entry point is for
running the webhook on its own (a second Deployment, or a developer's machine whose address the chart's
``operator.webhook.url`` points at). Settings come from the environment the chart sets:

* ``METAX_NAMESPACE`` (metax-operator), ``METAX_WEBHOOK_NAME`` (metax-operator-webhook): where the Secret,
  Service and ValidatingWebhookConfiguration are;
* ``METAX_WEBHOOK_PORT`` (9443), ``METAX_WEBHOOK_HOST`` (0.0.0.0), ``METAX_WEBHOOK_CERT_DAYS`` (365);
* ``METAX_WEBHOOK_EXTRA_HOSTS``: more certificate names/IPs, comma separated;
* ``KUBECONFIG`` or the in-cluster service account.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Mapping

from metax_core.errors import ClusterError, InvalidSpec
from metax_k8s import client, connect
from services._agent import service
from services.webhook import server


def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
    """The webhook's HTTPS server, serving from here on (its certificate in place); it stops with the run."""
    settings = server.settings_from_env(environ)
    api = client.HttpApi(connect.connect(args.kubeconfig))
    running = server.serve(settings, api)
    print(f"metax-operator-webhook: serving on port {running.port}", file=sys.stderr, flush=True)

    def run(stop: threading.Event) -> None:
        stop.wait()
        running.shutdown()

    return run


main = service.Service(
    "operator-webhook",
    start,
    description=__doc__.split("\n")[0],
    doc="docs/webhook.md",
    refused=(InvalidSpec, ClusterError),
    options=lambda parser: parser.add_argument("--kubeconfig", help="default: in-cluster, then $KUBECONFIG"),
).main


if __name__ == "__main__":
    sys.exit(main())
