"""``metax-operator uninstall``: delete ``cluster-operator`` and wait until the operator has cleaned up.

Why it exists: `helm uninstall` deletes the operator together with everything else. If the operator went
first, the ClusterOperator's finalizer (which removes the DaemonSets, ConfigMaps, component RBAC, node labels
and annotations the operator created) would never run. The chart's pre-delete hook runs this command before
Helm deletes anything: it deletes the object and waits until it is gone, i.e. the finalizer has finished.
When the time runs out it fails, naming the finalizers still pending, so `helm uninstall` stops with a reason
instead of leaving half the product behind.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from metax_core.errors import MetaxError, NotFound
from metax_core.spec import model as spec
from metax_k8s.api import Api
from services.cli import connection

API_VERSION = f"{spec.API_GROUP}/{spec.API_VERSION}"


class CleanupTimeout(MetaxError):
    """The ClusterOperator still exists when the time is up."""


def delete_and_wait(
    api: Api,
    timeout: float,
    *,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Delete ``cluster-operator`` and wait until it is gone; what happened, or CleanupTimeout."""
    try:
        api.delete(API_VERSION, spec.KIND, spec.OBJECT_NAME)
    except NotFound:
        return f"{spec.OBJECT_NAME} does not exist: nothing to clean up"
    deadline = clock() + timeout
    while True:
        try:
            current: dict[str, Any] = api.get(API_VERSION, spec.KIND, spec.OBJECT_NAME)
        except NotFound:
            return f"{spec.OBJECT_NAME} deleted; the operator's cleanup has finished"
        if clock() >= deadline:
            pending = ", ".join(current.get("metadata", {}).get("finalizers") or []) or "none"
            raise CleanupTimeout(
                f"{spec.OBJECT_NAME} still exists after {timeout:.0f}s (finalizers pending: {pending}); is the "
                "operator running? Check `kubectl -n metax-operator logs deployment/metax-operator`"
            )
        sleep(interval)


def cmd_uninstall(args: argparse.Namespace) -> int:
    api = connection.api(args.kubeconfig, "metax-operator")  # a cluster that cannot be used: services.cli.main
    print(delete_and_wait(api, args.timeout))
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "uninstall",
        help="delete cluster-operator and wait for the operator's cleanup (the chart's pre-delete hook)",
        description="Delete cluster-operator and wait until it is gone (its finalizer: the operator's cleanup). "
        "Exit codes: 0 cleaned up (or nothing to clean up), 1 still there when --timeout runs out, "
        f"{connection.EXIT_NO_CLUSTER} the cluster cannot be used.",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")
    connection.add_options(p)
    p.set_defaults(func=cmd_uninstall)
