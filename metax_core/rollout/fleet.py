"""The rollout's view of the driver pods (R-ROLLOUT, R-READY): revisions, the failure rule, the fleet snapshot.

Why here and not in the operator: whether a driver pod has failed decides whether the canary stops the
rollout, so it is a rule of the rollout, not a detail of gathering. Pure: pods arrive as the operator's slim
dicts (`services.operator.informers.slim_pod`: ``status.phase``, ``status.ready``, ``status.restarts``,
``status.waiting``, ``metadata.creationTimestamp`` / ``deletionTimestamp`` and the revision annotation), the
clock is the ``now`` argument.

The failure rule: a driver pod that is not Ready has failed when its container crash-loops (``restarts`` at
least ``crash_restarts``, or waiting in CrashLoopBackOff / an image or create error), when its phase is
Failed, when driver-manager's verdict on the node says the wanted driver cannot load (`driver_verdict`, reached
after the pod started: fail fast, issue 41 item 1), or when it has existed longer than ``ready_timeout``
without being Ready. driver-manager keeps running on a driver that does not load (it must, to keep the node's
previous driver) and its readinessProbe stays false (docs/agents.md); its verdict counts the pod failed at once,
and the timeout is left for silence (a driver-manager that hangs or never gets that far).

The revision of a driver pod is ours (``metax-tech.com/driver-revision``, the hash of the rendered pod
template), the same on every API server, unlike the DaemonSet controller's own hash. It leaves out the images of
the pod's containers: they run driver-manager, the operator's own agent, whose image changes with every operator
release, while the driver is the payload (the init container) and the pod's settings (R-UPGRADE). So an operator
upgrade alone starts no driver rollout and moves no paused one; the agent's image has its own annotation
(``metax-tech.com/driver-agent``), and `agent_restarts` brings the new driver-manager to the nodes a few at a time,
each keeping its loaded driver (driver-manager keeps a driver whose version and parameters are the payload's).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.components import Component
from metax_core.rollout import model
from metax_core.rollout import status as rollout_status
from metax_core.spec import converter
from metax_core.spec import model as spec
from metax_core.wire import driver_verdict, meta

REVISION_ANNOTATION = meta.DRIVER_REVISION
AGENT_ANNOTATION = meta.DRIVER_AGENT
DRIVER_SPEC_ANNOTATION = meta.DRIVER_SPEC

TIMED_COMPONENTS = frozenset({Component.DRIVER.value})
"""The components whose pods' creation and start times the failure rule reads (`pod_failed`: the driver's). A
reader that keeps pods (the operator's cache) needs those times of these pods only."""
STUCK_REASONS = frozenset({"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerError"})
"""Container waiting reasons from which a driver pod does not recover by itself."""

Pod = Mapping[str, Any]


def _digest(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


def revision_of(template: Mapping[str, Any]) -> str:
    """The hash of a pod template without our own annotations and without its containers' images (the agent's)."""
    bare = copy.deepcopy(dict(template))
    annotations = (bare.get("metadata") or {}).get("annotations", {})
    annotations.pop(REVISION_ANNOTATION, None)
    annotations.pop(AGENT_ANNOTATION, None)
    for container in (bare.get("spec") or {}).get("containers") or ():
        container.pop("image", None)
    return _digest(bare)


def agent_of(template: Mapping[str, Any]) -> str:
    """The hash of a pod template's container images: which driver-manager release its pods run."""
    return _digest([c.get("image", "") for c in (template.get("spec") or {}).get("containers") or ()])


def _stamp(template: dict[str, Any]) -> None:
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[REVISION_ANNOTATION] = revision_of(template)
    annotations[AGENT_ANNOTATION] = agent_of(template)


def with_agent(template_text: str, desired_template: Mapping[str, Any]) -> dict[str, Any]:
    """A stored template (``lastAppliedSpec``) running the desired template's driver-manager image.

    A rollback restores the previous driver, not the previous operator release's agent: the containers named as
    in the desired template take its images, and the agent annotation follows them. The revision annotation is
    kept as stored: it leaves the images out, and the stored template is the live one, with the API server's
    defaults, so hashing it again would name another revision than the one its pods carry.
    """
    template: dict[str, Any] = json.loads(template_text)
    images = {c.get("name"): c.get("image") for c in (desired_template.get("spec") or {}).get("containers") or ()}
    for container in (template.get("spec") or {}).get("containers") or ():
        if images.get(container.get("name")):
            container["image"] = images[container.get("name")]
    template.setdefault("metadata", {}).setdefault("annotations", {})[AGENT_ANNOTATION] = agent_of(template)
    return template


def stamped(manifest: Mapping[str, Any], driver: spec.Driver | None) -> dict[str, Any]:
    """The driver DaemonSet with its template's revision (and the spec.driver it came from) annotated."""
    result = copy.deepcopy(dict(manifest))
    _stamp(result["spec"]["template"])
    if driver is not None:
        text = json.dumps(converter.unstructure(driver), sort_keys=True)
        result["metadata"].setdefault("annotations", {})[DRIVER_SPEC_ANNOTATION] = text
    return result


def template_revision(ds: Mapping[str, Any] | None) -> str | None:
    """The revision annotated on a DaemonSet's pod template (None: no DaemonSet or not stamped)."""
    if ds is None:
        return None
    template = (ds.get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)


def pod_revision(pod: Pod) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)


def pod_agent(pod: Pod) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(AGENT_ANNOTATION)


def _time(pod: Pod, part: str, key: str) -> dt.datetime | None:
    """The pod's ``part.key`` time; None when absent or unreadable."""
    text = (pod.get(part) or {}).get(key)
    if not text:
        return None
    try:
        return rollout_status.parse_time(str(text))
    except ValueError:
        return None


def _created(pod: Pod) -> dt.datetime | None:
    return _time(pod, "metadata", "creationTimestamp")


def pod_ready(pod: Pod) -> bool:
    return bool((pod.get("status") or {}).get("ready"))


def _started(pod: Pod) -> dt.datetime | None:
    return _time(pod, "status", "startTime")


def pod_failed(
    pod: Pod,
    now: dt.datetime,
    *,
    ready_timeout: float,
    crash_restarts: int,
    verdict: driver_verdict.Verdict | None = None,
) -> bool:
    """The driver pod will not become Ready without help (the module docstring's rule); ``verdict``: its node's."""
    st = pod.get("status") or {}
    if st.get("ready"):
        return False
    if st.get("phase") == "Failed" or int(st.get("restarts") or 0) >= crash_restarts:
        return True
    name = str((pod.get("metadata") or {}).get("name") or "")
    if verdict is not None and driver_verdict.applies_to(verdict, name, _started(pod)):
        return True
    if any(w in STUCK_REASONS for w in st.get("waiting") or ()):
        return True
    created = _created(pod)
    return created is not None and (now - created).total_seconds() > ready_timeout


def fails_at(pod: Pod, *, ready_timeout: float) -> dt.datetime | None:
    """When a pod that is neither Ready nor failed yet turns failed by the timeout alone (None: it cannot)."""
    created = _created(pod)
    if created is None or pod_ready(pod):
        return None
    return created + dt.timedelta(seconds=ready_timeout)


@attrs.frozen
class Snapshot:
    """The fleet for `machine.decide`, the driver pod chosen on each node, and when to look again."""

    fleet: model.Fleet
    pods_by_node: Mapping[str, Pod]
    recheck_at: dt.datetime | None = None
    """The earliest moment a driver pod that is not Ready yet turns failed by the timeout: nothing
    changes on the API then, so the operator must look again by itself."""


def _live_template_text(live_ds: Mapping[str, Any] | None, new_manifest: Mapping[str, Any]) -> str:
    live_template = (live_ds or {}).get("spec", {}).get("template") if live_ds else None
    return json.dumps(live_template or new_manifest["spec"]["template"], sort_keys=True)


def pick_pods(driver_pods: Sequence[Pod]) -> dict[str, Pod]:
    """One driver pod per node: a pod that is not terminating wins over one that is."""
    by_node: dict[str, Pod] = {}
    for candidate in driver_pods:
        node = (candidate.get("spec") or {}).get("nodeName")
        if node:
            older = by_node.get(str(node))
            if older is None or (older.get("metadata") or {}).get("deletionTimestamp"):
                by_node[str(node)] = candidate
    return by_node


def places_no_other_node(live_ds: Mapping[str, Any] | None, nodes_with_a_pod: int) -> bool:
    """Every node the driver DaemonSet places a pod on has one, by the DaemonSet controller's own count.

    Then a GPU node without a driver pod is one the DaemonSet does not place on (its nodeSelector, affinity
    or a taint it does not tolerate keeps it off), and it is not part of the rollout: counted, it would be a
    node forever in flight that the rollout waits for. While the count is short (a pod deleted and not yet
    recreated, a node just labelled) or not current for the DaemonSet's generation, the GPU nodes without a
    pod stay in scope, as in flight.
    """
    status = (live_ds or {}).get("status") or {}
    generation = ((live_ds or {}).get("metadata") or {}).get("generation")
    desired, observed = status.get("desiredNumberScheduled"), status.get("observedGeneration")
    if desired is None or generation is None or observed is None or int(observed) < int(generation):
        return False
    return nodes_with_a_pod >= int(desired)


def node_verdicts(nodes: Iterable[Mapping[str, Any]]) -> tuple[dict[str, driver_verdict.Verdict], list[str]]:
    """driver-manager's verdicts by node name, and what is wrong with the ones that cannot be read."""
    found: dict[str, driver_verdict.Verdict] = {}
    problems: list[str] = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        text = (metadata.get("annotations") or {}).get(driver_verdict.ANNOTATION)
        if not text:
            continue
        try:
            found[str(metadata.get("name"))] = driver_verdict.decode(str(text))
        except ValueError as exc:
            problems.append(f"node {metadata.get('name')}: {exc}")
    return found, problems


def snapshot(
    *,
    new_manifest: Mapping[str, Any],
    live_ds: Mapping[str, Any] | None,
    driver_pods: Sequence[Pod],
    gpu_nodes: Sequence[str],
    busy: set[str],
    now: dt.datetime,
    ready_timeout: float,
    crash_restarts: int,
    verdicts: Mapping[str, driver_verdict.Verdict] | None = None,
    drain_blockers: Mapping[str, str] | None = None,
) -> Snapshot:
    """Every node in scope (GPU nodes and nodes with a driver pod; `places_no_other_node` narrows it to the
    latter) with its revision, readiness and failure.

    ``new_manifest`` is the desired DaemonSet already `stamped`. A node whose pod is terminating or missing
    is in flight on the DaemonSet's current revision (the `model` contract).
    """
    new_rev = template_revision(new_manifest) or ""
    live_rev = template_revision(live_ds) or new_rev
    old_driver = ((live_ds or {}).get("metadata") or {}).get("annotations", {}).get(DRIVER_SPEC_ANNOTATION, "")
    pods_by_node = pick_pods(driver_pods)
    blockers = drain_blockers or {}
    scope = (
        set(pods_by_node) if places_no_other_node(live_ds, len(pods_by_node)) else set(gpu_nodes) | set(pods_by_node)
    )
    nodes: list[model.Node] = []
    deadlines: list[dt.datetime] = []
    for name in sorted(scope):
        pod = pods_by_node.get(name)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            rev = model.Revision.NEW if live_rev == new_rev else model.Revision.OLD
            nodes.append(
                model.Node(
                    name, rev, ready=False, failed=False, busy=name in busy, drain_blocker=blockers.get(name, "")
                )
            )
            continue
        revision = model.Revision.NEW if pod_revision(pod) == new_rev else model.Revision.OLD
        ready = pod_ready(pod)
        verdict = (verdicts or {}).get(name)
        failed = pod_failed(pod, now, ready_timeout=ready_timeout, crash_restarts=crash_restarts, verdict=verdict)
        if not ready and not failed and (at := fails_at(pod, ready_timeout=ready_timeout)) is not None:
            deadlines.append(at)
        nodes.append(
            model.Node(
                name, revision, ready=ready, failed=failed, busy=name in busy, drain_blocker=blockers.get(name, "")
            )
        )
    fleet = model.Fleet(
        nodes,
        old_revision=live_rev,
        new_revision=new_rev,
        old_spec=_live_template_text(live_ds, new_manifest),
        old_driver_spec=old_driver,
    )
    return Snapshot(fleet, pods_by_node, min(deadlines) if deadlines else None)


def behind(desired: Mapping[str, Any], driver_pods: Sequence[Pod]) -> bool:
    """Some driver pod runs another revision than the desired template's: a rollout may act."""
    want = template_revision(stamped(desired, None))
    return any(pod_revision(p) != want for p in driver_pods)


def agent_pace(max_unavailable: spec.IntOrPercent, driver_pods: int) -> int:
    """How many driver pods `agent_restarts` may have going at once: ``agentUpdate.maxUnavailable`` of the driver
    pods, a percentage rounded up as a DaemonSet's is, at least one (a pace of none would never finish)."""
    return max(1, max_unavailable.resolve(driver_pods, round_up=True))


def agent_restarts(
    applied: Mapping[str, Any], pods_by_node: Mapping[str, Pod], max_unavailable: int
) -> tuple[str, ...]:
    """The nodes whose driver pod to delete now so that it runs the applied template's driver-manager (R-UPGRADE).

    Only pods already on the applied template's revision (the same driver) with another agent image, Ready, in
    name order; and only as many as keep at most ``max_unavailable`` driver pods not Ready or going at once (any
    revision: a rollout's own restarts count). The operator calls it only when the rollout restarts nothing itself.
    Nodes with GPU workloads are not spared: the new pod keeps the loaded driver, and running workloads keep it.
    """
    revision, agent = template_revision(applied), agent_of(applied["spec"]["template"])
    unavailable = sum(
        1 for p in pods_by_node.values() if not pod_ready(p) or (p.get("metadata") or {}).get("deletionTimestamp")
    )
    budget = max(0, max_unavailable) - unavailable
    if budget <= 0:
        return ()
    stale = [
        node
        for node, pod in sorted(pods_by_node.items())
        if pod_revision(pod) == revision
        and pod_agent(pod) != agent
        and pod_ready(pod)
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    return tuple(stale[:budget])
