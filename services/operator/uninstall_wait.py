"""The finalizer's first phase (R-INSTALL): ask the nodes' agents to undo, wait for their answers, say so.

Why a module of its own: the reconciler only asks "may the cleanup go on, and when do I look again?". This
module gathers what `metax_core.node.uninstall.finalize` decides from (which agents run where, from the pod
cache; the request and the answers, from the node cache; how long the wait has run, from the CR's
``deletionTimestamp``, so an operator restart does not start it again), applies it (the request on each node
that lacks it, an ``UninstallIncomplete`` Event when the bounded wait is over) and reports it in the
``Uninstalling`` condition. The end of the wait is recorded there too (`NodesUndone` or
`UninstallIncomplete`), so a cleanup interrupted after it removed the answers does not wait for them again.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any

import attrs

from metax_core.cluster import node_undos
from metax_core.cluster import status as cluster_status
from metax_core.errors import NotFound
from metax_core.node import uninstall
from metax_core.ports.cluster import Events, EventType, NodeMetadata, ObjectRef, Objects, RawObject
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec

log = logging.getLogger(__name__)

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
UNINSTALLING = "Uninstalling"
"""The condition the wait is reported in."""
WAITING_REASON = "WaitingForNodes"


@attrs.frozen
class Wait:
    decision: uninstall.FinalizeDecision
    again_in: float
    """Seconds until the wait is over (the reconciler looks again then, or sooner when a node changes)."""


def over(cr: RawObject) -> bool:
    """The wait already ended (recorded in the condition)."""
    for c in (cr.get("status") or {}).get("conditions") or []:
        if c.get("type") == UNINSTALLING:
            return c.get("reason") in (uninstall.DONE_REASON, uninstall.INCOMPLETE_REASON)
    return False


def waited(cr: RawObject, now: dt.datetime) -> float:
    since = rollout_status.parse_time(str(cr["metadata"]["deletionTimestamp"]))
    return max(0.0, (now - since).total_seconds())


def await_agents(
    cr: RawObject,
    *,
    node_list: Iterable[RawObject],
    pods: Iterable[RawObject],
    nodes: NodeMetadata,
    objects: Objects,
    events: Events,
    ref: ObjectRef,
    timeout: float,
    now: dt.datetime,
    field_manager: str,
) -> Wait:
    """Ask every node running our agents to undo, and say whether their answers are in."""
    uid = str(cr["metadata"].get("uid") or "")
    undos = node_undos.node_undos(node_list, pods)
    spent = waited(cr, now)
    decision = uninstall.finalize(undos, uid, waited=spent, timeout=timeout)
    for name in decision.to_request:
        try:
            nodes.patch_node_metadata(name, annotations=dict(uninstall.render_request(uid)))
        except NotFound:
            continue
        log.info("node %s: asked its agents to undo their host changes", name)
    if decision.timed_out:
        log.warning("%s", decision.message)
        events.emit(
            ref, reason=uninstall.INCOMPLETE_REASON, message=decision.message, type=EventType.WARNING, action="Delete"
        )
    if undos or decision.proceed:
        _write_condition(cr, decision, objects, now, field_manager)
    return Wait(decision, max(1.0, timeout - spent))


def _write_condition(
    cr: RawObject, decision: uninstall.FinalizeDecision, objects: Objects, now: dt.datetime, field_manager: str
) -> bool:
    """The ``Uninstalling`` condition: waiting for (or given up on) the named nodes, or every node answered."""
    if decision.timed_out:
        reason = uninstall.INCOMPLETE_REASON
    elif decision.proceed:
        reason = uninstall.DONE_REASON
    else:
        reason = WAITING_REASON
    stored: dict[str, Any] = dict(cr.get("status") or {})
    conditions = [c for c in stored.get("conditions") or [] if c.get("type") != UNINSTALLING]
    before = next((c for c in stored.get("conditions") or [] if c.get("type") == UNINSTALLING), None)
    generation = int(cr["metadata"].get("generation") or 0)
    condition = cluster_status.condition_document(
        cluster_status.Condition(UNINSTALLING, "True", reason, decision.message, now, generation)
    )
    if before is not None and (before.get("reason"), before.get("message")) == (reason, condition["message"]):
        return False
    stored["conditions"] = [*conditions, condition]
    body = {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "status": stored}
    objects.apply_status(body, field_manager=field_manager, force=True)
    return True
