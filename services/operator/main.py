"""`metax-operator-controller` (and `metax-operator run`): build the operator, run it until SIGTERM/SIGINT.

Why a module of its own: the composition root (`bootstrap`) imports the loop (`run`); the entry point sits
above both.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

from metax_core import release
from metax_core.errors import MetaxError
from metax_core.wire import operator_env
from metax_k8s import client, connect
from services.operator import bootstrap
from services.webhook import server

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """`metax-operator-controller` (and `metax-operator run`): run until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="metax-operator-controller",
        description="The MetaX GPU operator: reconciles the cluster-operator object and serves its webhook.",
        epilog="Configured by the environment variables of the chart's Deployment (docs/operator.md).",
    )
    parser.add_argument("--version", action="version", version=release.running())
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        op = bootstrap.bootstrap()
        webhook = _start_webhook(os.environ)
    except MetaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        op.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    op.start()
    op.wait()
    op.stop()
    if webhook is not None:
        webhook.shutdown()
    return 0


def _start_webhook(env: Mapping[str, str]) -> server.WebhookServer | None:
    """The validating webhook (and the /healthz, /readyz probes) in this process, when the chart asks for it.

    The chart sets ``METAX_WEBHOOK_PORT``; a developer's operator run without it serves no webhook. Every replica
    serves it (admission must not wait for an election); only the certificates are shared, through the Secret.
    """
    if operator_env.WEBHOOK_PORT not in env:
        return None
    running = server.serve(server.settings_from_env(env), client.HttpApi(connect.connect(env.get("KUBECONFIG"))))
    log.info("validating webhook serving on port %d", running.port)
    return running
