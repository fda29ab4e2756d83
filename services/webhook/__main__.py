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
import logging
import os
import signal
import sys
import threading

from metax_core.errors import ClusterError, InvalidSpec
from metax_k8s import client, connect
from services.webhook import server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metax-operator-webhook", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="default: in-cluster, then $KUBECONFIG")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = server.settings_from_env(os.environ)
        api = client.HttpApi(connect.connect(args.kubeconfig))
        running = server.serve(settings, api)
    except (InvalidSpec, ClusterError) as exc:
        print(f"metax-operator-webhook: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"metax-operator-webhook: serving on port {running.port}", file=sys.stderr, flush=True)
    stop.wait()
    running.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
