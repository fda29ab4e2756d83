"""Cordoning a node for a driver rollout's drain, and uncordoning only what the rollout cordoned (issue 41 item 3;
docs/rollout.md "Draining").

Why a module of its own: ``spec.unschedulable`` is shared with administrators, ``kubectl drain`` and cluster
autoscalers. A node the rollout cordons carries the annotation ``metax-tech.com/rollout-cordon`` (set in the same
patch), and the rollout uncordons a node only while the annotation is there (removed in the same patch), so a
node someone else cordoned stays cordoned after the rollout, and an operator restart in between loses nothing.
Each patch carries the ``resourceVersion`` it was decided on (a precondition), so a cordon by someone else at
the same moment is never taken for ours: the decision is read again and made again.
"""

from __future__ import annotations

import logging
from typing import Any

from metax_core.errors import Conflict, NotFound
from metax_core.wire import meta
from metax_k8s.api import Api

log = logging.getLogger(__name__)

MARK = meta.ROLLOUT_CORDON
ATTEMPTS = 3


class Cordons:
    def __init__(self, api: Api, *, field_manager: str) -> None:
        self.api = api
        self.field_manager = field_manager

    def cordon(self, name: str, since: str) -> bool:
        """Cordon ``name`` for the rollout; False when it was unschedulable already (someone else's: left as it is)
        or is gone. True when the rollout holds it (now or before)."""
        return self._change(name, cordon=True, since=since)

    def uncordon(self, name: str) -> bool:
        """Give ``name`` back if the rollout cordoned it; False when it did not (or the node is gone)."""
        return self._change(name, cordon=False, since="")

    def _change(self, name: str, *, cordon: bool, since: str) -> bool:
        for _ in range(ATTEMPTS):
            try:
                node = self.api.get("v1", "Node", name)
            except NotFound:
                return False
            metadata = node.get("metadata") or {}
            ours = MARK in (metadata.get("annotations") or {})
            unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
            if cordon and (ours or unschedulable):
                return ours
            if not cordon and not ours:
                return False
            patch: dict[str, Any] = {
                "metadata": {"resourceVersion": metadata.get("resourceVersion"), "annotations": {MARK: since or None}},
                "spec": {"unschedulable": True if cordon else None},
            }
            try:
                self.api.merge_patch("v1", "Node", name, patch, field_manager=self.field_manager)
            except Conflict:
                continue  # changed meanwhile: decide again on what it is now
            except NotFound:
                return False
            log.info("node %s: %s for the driver rollout", name, "cordoned" if cordon else "uncordoned")
            return True
        raise Conflict("patch", f"Node {name}", f"changed {ATTEMPTS} times while being (un)cordoned")
