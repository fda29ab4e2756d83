"""Bring the ClusterOperator CRD to this operator's release before reconciling (R-UPGRADE).

Why a module of its own: Helm never upgrades a chart's ``crds/``, so after ``helm upgrade`` the operator is the
one that can. The rule (apply ours, never a downgrade, refuse to reconcile against an older schema) is
`metax_core.cluster.crd_policy`; this module gathers the live CRD, applies ours with server-side apply when the
rule says so, and waits until the API server reports it Established. The operator's ClusterRole may get and
patch this one CRD by name (docs/security.md); it never creates or deletes it (the chart's ``crds/`` does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

from metax_core.cluster import crd_policy
from metax_core.errors import MetaxError
from metax_core.ports.cluster import Objects, RawObject
from metax_k8s import crd

log = logging.getLogger(__name__)

API_VERSION = "apiextensions.k8s.io/v1"
KIND = "CustomResourceDefinition"
ESTABLISHED_WAIT = 30.0
"""Seconds an applied CRD may take to be Established again before the start says it could not."""


@attrs.frozen
class CrdState:
    """What the cluster serves after `ensure`: its release, and why it is not current (empty: it is)."""

    release: str | None
    problem: str = ""
    applied: bool = False


def established(live: RawObject | None) -> bool:
    conditions = ((live or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def ensure(
    objects: Objects,
    mine: str,
    *,
    field_manager: str,
    sleep: Callable[[float], None] = time.sleep,
    wait: float = ESTABLISHED_WAIT,
) -> CrdState:
    """Apply this release's CRD when `crd_policy.choose` says so; report what the cluster serves afterwards."""
    live = objects.get(API_VERSION, KIND, crd.NAME)  # an API server that cannot be reached: the caller's retry
    theirs = crd_policy.release_of(live)
    if crd_policy.choose(theirs, mine) is crd_policy.Choice.KEEP_NEWER:
        log.info("the ClusterOperator CRD is release %s's, newer than this operator (%s): kept", theirs, mine)
        return CrdState(theirs)
    if crd_policy.already_served(theirs, mine, established=established(live)):
        return CrdState(theirs)
    try:
        objects.apply(crd.crd(), field_manager=field_manager, force=True)
    except MetaxError as exc:
        log.warning("applying the ClusterOperator CRD of release %s failed: %s", mine, exc)
        return CrdState(theirs, crd_policy.outdated_message(theirs, mine, str(exc)))
    deadline = time.monotonic() + wait
    while True:
        live = objects.get(API_VERSION, KIND, crd.NAME)
        if established(live) and crd_policy.release_of(live) == mine:
            log.info("the ClusterOperator CRD is now release %s's (was %s)", mine, theirs or "unstamped")
            return CrdState(mine, applied=True)
        if time.monotonic() >= deadline:
            why = f"it was applied but not Established within {wait:.0f} s"
            return CrdState(theirs, crd_policy.outdated_message(theirs, mine, why))
        sleep(0.2)
