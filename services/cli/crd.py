"""``metax-operator apply-crd``: bring the ClusterOperator CRD to this release before Helm upgrades anything.

Why it exists: Helm never upgrades a chart's ``crds/``. The operator applies its own CRD when it starts, but in a
``helm upgrade`` Helm writes ``cluster-operator`` before the new operator runs, and the previous release's schema
would prune a new field the administrator set in that same upgrade. The chart's pre-upgrade hook runs this command
first (the new release's image, the operator's ServiceAccount, which may get and patch this one CRD): it applies the
CRD by the rule of `metax_core.cluster.crd_policy` (never a downgrade) and waits until it is Established. When it
cannot, it fails with the reason, and ``helm upgrade`` stops before changing anything.
"""

from __future__ import annotations

import argparse
from typing import Any

from metax_core import release
from metax_core.wire import meta
from metax_k8s import objects
from metax_k8s.crd import sync as crd_sync
from services.cli import connection


def cmd_apply_crd(args: argparse.Namespace) -> int:
    api = connection.api(args.kubeconfig, "metax-operator")  # a cluster that cannot be used: services.cli.main
    mine = release.running()
    state = crd_sync.ensure(objects.K8sObjects(api), mine, field_manager=meta.OPERATOR_FIELD_MANAGER)
    if state.problem:
        print(state.problem)
        return 1
    if state.applied:
        print(f"the ClusterOperator CRD now serves release {mine}'s schema")
    else:
        print(f"the ClusterOperator CRD serves release {state.release}'s schema (this release: {mine}): kept")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "apply-crd",
        help="apply this release's ClusterOperator CRD unless the cluster's is newer (the chart's pre-upgrade hook)",
        description="Apply this release's ClusterOperator CRD (server-side apply) unless the cluster serves a newer "
        "release's, and wait until it is Established (docs/upgrade.md). Exit codes: 0 the CRD is this release's or "
        f"newer, 1 it could not be applied, {connection.EXIT_NO_CLUSTER} the cluster cannot be used.",
    )
    connection.add_options(p)
    p.set_defaults(func=cmd_apply_crd)
