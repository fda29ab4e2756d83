"""How every `metax-operator` command that needs a cluster finds it, and what it does when it cannot reach it.

Why one module: ``doctor``, ``diff``, ``rollout confirm`` and ``uninstall`` each had their own ``--kubeconfig``
help (three lookup orders, one of them not what the code does) and their own exit code for "no cluster" (3 or
1). Now each adds its options with `add_options` and the CLI's entry point (`services.cli.main`) turns a
`ClusterError` that reaches it into `EXIT_NO_CLUSTER`, with `-o json` as a JSON error document
(`documents.print_failure`).
"""

from __future__ import annotations

import argparse

from metax_core.errors import ClusterError
from metax_k8s.api import Api
from services.cli import documents

EXIT_NO_CLUSTER = 3
"""Every command that needs a cluster exits with this when it cannot use it: no usable kubeconfig, no answer from
the API server, or a request it refuses (forbidden, a server error)."""

KUBECONFIG_HELP = (
    "kubeconfig file (its current context). Without it: in a pod (KUBERNETES_SERVICE_HOST set) the pod's "
    "ServiceAccount, else $KUBECONFIG (one file, not a list), else ~/.kube/config"
)
"""What `metax_k8s.connect.connect` does, in the order it does it: the one help text of every ``--kubeconfig``."""

EPILOG = (
    f"Exit code {EXIT_NO_CLUSTER}: the cluster cannot be used (no usable kubeconfig, no answer from the API server, "
    "or a request it refuses)."
)
JSON_EPILOG = ' With -o json every outcome is JSON on stdout; a failure is {"error": WHAT, "message": TEXT}.'

KUBECONFIG_ERROR = "kubeconfig"
"""The ``error`` of the JSON error document when no cluster configuration could be loaded."""
API_SERVER_ERROR = "api-server"
"""The ``error`` when the API server did not answer or refused a request."""


def add_options(parser: argparse.ArgumentParser, *, json_output: bool = False) -> None:
    """``--kubeconfig`` and the exit code note, for a command that needs a cluster (``json_output``: it has
    ``-o json``, and the note says how a failure looks there)."""
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.epilog = EPILOG + (JSON_EPILOG if json_output else "")


def api(kubeconfig: str | None, user_agent: str) -> Api:
    """The cluster, found as `KUBECONFIG_HELP` says; `ClusterError` (verb ``configure``) when there is none."""
    from metax_k8s import client, connect  # urllib3 and TLS only for the commands that talk to a cluster

    return client.HttpApi(connect.connect(kubeconfig), user_agent=user_agent)


def unreachable(exc: ClusterError, *, json_output: bool = False) -> int:
    """Report that the cluster cannot be used (on stderr, or with ``json_output`` as JSON on stdout)."""
    error = KUBECONFIG_ERROR if exc.verb == "configure" else API_SERVER_ERROR
    if error == KUBECONFIG_ERROR:
        message = f"no usable cluster configuration: {exc}"
    elif exc.status is None:
        message = f"cannot reach the API server: {exc}"
    else:
        message = f"the API server refused a request: {exc}"
    documents.print_failure(error, message, json_output=json_output)
    return EXIT_NO_CLUSTER
