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
from collections.abc import Mapping

from metax_core.errors import ClusterError, FieldError, InvalidSpec
from metax_k8s import client
from services.webhook import server


def settings_from_env(env: Mapping[str, str]) -> server.Settings:
    """Settings from the environment; InvalidSpec names every bad variable."""
    errors = []
    numbers: dict[str, int] = {}
    for var, default in (("METAX_WEBHOOK_PORT", 9443), ("METAX_WEBHOOK_CERT_DAYS", 365)):
        text = env.get(var, str(default))
        if not text.isdigit() or int(text) < 1:
            errors.append(FieldError(var, f"must be a positive integer, got {text!r}"))
        else:
            numbers[var] = int(text)
    if errors:
        raise InvalidSpec(errors)
    return server.Settings(
        namespace=env.get("METAX_NAMESPACE", "metax-operator"),
        name=env.get("METAX_WEBHOOK_NAME", "metax-operator-webhook"),
        host=env.get("METAX_WEBHOOK_HOST", "0.0.0.0"),
        port=numbers["METAX_WEBHOOK_PORT"],
        cert_days=numbers["METAX_WEBHOOK_CERT_DAYS"],
        extra_hosts=tuple(server.hosts_from_env(env.get("METAX_WEBHOOK_EXTRA_HOSTS"))),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metax-operator-webhook", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="default: in-cluster, then $KUBECONFIG")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from_env(os.environ)
        api = client.HttpApi(client.api_client(args.kubeconfig))
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
