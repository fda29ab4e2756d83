"""Drives the driver rollout (R-ROLLOUT) for real: fleet snapshot → `rollout.machine.decide` → apply.

Why a module of its own: the machine is pure; this is the shell around it. Each reconcile it builds the
`Fleet` from the informer caches — every driver pod with the revision of the template it was created from
(our annotation ``metax-tech.com/driver-revision``, the hash of the rendered pod template; it works the same
on every API server, unlike the controller's own hash), Ready or failed (crash-looping, or not Ready within
``driver_ready_timeout``), and whether GPU workloads run on its node (`metax_core.cluster.gpu_workloads`) —
calls ``decide`` with the stored ``status.upgradeStatus``, and returns the driver DaemonSet to apply (new
template, or lastAppliedSpec when rolling back), the pods to delete and the status to store. The operator
never writes ``spec`` (issue 16): a step that waits for an administrator is described in the status and
confirmed by the ``metax-tech.com/rollout-confirm`` annotation.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.cluster.components import Component
from metax_core.cluster.workloads import COMPONENT_LABEL
from metax_core.errors import InvalidSpec
from metax_core.ports.cluster import RawObject
from metax_core.rollout import machine
from metax_core.rollout import status as rollout_status
from metax_core.spec import converter
from metax_core.spec import model as spec

log = logging.getLogger(__name__)

REVISION_ANNOTATION = "metax-tech.com/driver-revision"
DRIVER_SPEC_ANNOTATION = "metax-tech.com/driver-spec"


def revision_of(template: Mapping[str, Any]) -> str:
    """The hash of a pod template without our own revision annotation."""
    bare = copy.deepcopy(dict(template))
    (bare.get("metadata") or {}).get("annotations", {}).pop(REVISION_ANNOTATION, None)
    return hashlib.sha256(json.dumps(bare, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


def stamped(manifest: Mapping[str, Any], driver: spec.Driver | None) -> dict[str, Any]:
    """The driver DaemonSet with its template's revision (and the spec.driver it came from) annotated."""
    result = copy.deepcopy(dict(manifest))
    template = result["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})
    rev = revision_of(template)
    template["metadata"]["annotations"][REVISION_ANNOTATION] = rev
    if driver is not None:
        text = json.dumps(converter.unstructure(driver), sort_keys=True)
        result["metadata"].setdefault("annotations", {})[DRIVER_SPEC_ANNOTATION] = text
    return result


def with_template(manifest: Mapping[str, Any], template_text: str) -> dict[str, Any]:
    """The driver DaemonSet carrying a stored template (lastAppliedSpec) instead of the rendered one."""
    result = copy.deepcopy(dict(manifest))
    result["spec"]["template"] = json.loads(template_text)
    return result


def _template_revision(ds: RawObject | None) -> str | None:
    if ds is None:
        return None
    template = (ds.get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)


def _age(pod: RawObject, now: dt.datetime) -> float:
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return 0.0
    try:
        return (now - rollout_status.parse_time(str(created))).total_seconds()
    except ValueError:
        return 0.0


def pod_failed(pod: RawObject, now: dt.datetime, *, ready_timeout: float, crash_restarts: int) -> bool:
    st = pod.get("status") or {}
    if st.get("ready"):
        return False
    if st.get("phase") == "Failed" or st.get("restarts", 0) >= crash_restarts:
        return True
    if any(
        w in ("CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerError")
        for w in st.get("waiting", [])
    ):
        return True
    return _age(pod, now) > ready_timeout


@attrs.frozen
class Outcome:
    manifest: Mapping[str, Any]
    """The driver DaemonSet to apply."""
    delete_pods: tuple[str, ...]
    upgrade: tuple[str, ...]
    rollback: tuple[str, ...]
    status: rollout_status.UpgradeStatus
    requeue_after: dt.timedelta | None
    waiting: tuple[str, ...]
    previous: rollout_status.UpgradeStatus | None = None
    ignored_confirmation: str = ""


def previous_status(cr_status: Mapping[str, Any] | None) -> rollout_status.UpgradeStatus | None:
    doc = (cr_status or {}).get("upgradeStatus")
    if not doc:
        return None
    try:
        return rollout_status.from_document(doc)
    except InvalidSpec as exc:
        log.warning("stored upgradeStatus is unreadable (%s); starting from scratch", exc)
        return None


def drive(
    *,
    s: spec.ClusterOperatorSpec,
    desired: Mapping[str, Any],
    live_ds: RawObject | None,
    driver_pods: Sequence[RawObject],
    gpu_nodes: Sequence[str],
    busy: set[str],
    cr_status: Mapping[str, Any] | None,
    now: dt.datetime,
    ready_timeout: float,
    crash_restarts: int,
    confirmation: str | None = None,
) -> Outcome:
    new_manifest = stamped(desired, s.driver)
    new_rev = _template_revision(new_manifest) or ""
    live_rev = _template_revision(live_ds) or new_rev
    live_template = (live_ds or {}).get("spec", {}).get("template") if live_ds else None
    old_spec = (
        json.dumps(live_template, sort_keys=True)
        if live_template
        else json.dumps(new_manifest["spec"]["template"], sort_keys=True)
    )
    old_driver = ((live_ds or {}).get("metadata") or {}).get("annotations", {}).get(DRIVER_SPEC_ANNOTATION, "")
    pods_by_node: dict[str, RawObject] = {}
    for candidate in driver_pods:
        node = (candidate.get("spec") or {}).get("nodeName")
        if node:
            older = pods_by_node.get(str(node))
            if older is None or (older.get("metadata") or {}).get("deletionTimestamp"):
                pods_by_node[str(node)] = candidate
    nodes = []
    for name in sorted(set(gpu_nodes) | set(pods_by_node)):
        pod = pods_by_node.get(name)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            rev = machine.Revision.NEW if live_rev == new_rev else machine.Revision.OLD
            nodes.append(machine.Node(name, rev, ready=False, failed=False, busy=name in busy))
            continue
        pod_rev = ((pod.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
        revision = machine.Revision.NEW if pod_rev == new_rev else machine.Revision.OLD
        ready = bool((pod.get("status") or {}).get("ready"))
        failed = pod_failed(pod, now, ready_timeout=ready_timeout, crash_restarts=crash_restarts)
        nodes.append(machine.Node(name, revision, ready=ready, failed=failed and not ready, busy=name in busy))
    fleet = machine.Fleet(
        nodes, old_revision=live_rev, new_revision=new_rev, old_spec=old_spec, old_driver_spec=old_driver
    )
    previous = previous_status(cr_status)
    decision = machine.decide(s.driver.upgrade_policy, previous, fleet, now, confirmation)
    manifest: Mapping[str, Any]
    if decision.template is machine.Template.LAST_APPLIED and decision.status.last_applied_spec:
        manifest = with_template(new_manifest, decision.status.last_applied_spec)
    else:
        manifest = new_manifest
    chosen = set(decision.upgrade) | set(decision.rollback)
    delete = tuple(
        sorted(
            str(p["metadata"]["name"])
            for n, p in pods_by_node.items()
            if n in chosen and not p["metadata"].get("deletionTimestamp")
        )
    )
    return Outcome(
        manifest=manifest,
        delete_pods=delete,
        upgrade=decision.upgrade,
        rollback=decision.rollback,
        status=decision.status,
        requeue_after=decision.requeue_after,
        waiting=decision.waiting,
        previous=previous,
        ignored_confirmation=decision.ignored_confirmation,
    )


def behind(desired: Mapping[str, Any], driver_pods: Sequence[RawObject]) -> bool:
    """Some driver pod runs another revision than the desired template's: a rollout may act."""
    want = _template_revision(stamped(desired, None))
    return any(
        ((p.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) != want for p in driver_pods
    )


def is_driver_pod(pod: RawObject) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(COMPONENT_LABEL) == Component.DRIVER.value
