"""`NodeMetadata` (metax_core.ports.cluster): node labels and annotations we own, and nothing else.

Why a JSON merge patch and not server-side apply: many writers share a Node (kubelet, cloud controllers,
NFD, other operators, administrators). A merge patch that names only our keys changes exactly those keys —
``null`` deletes one — without reading the node first, so there is no lost update and no conflict to retry,
and keys written by anyone else are left alone. (SSA would also work, but every agent would then have to
re-send all of its keys on every write, or lose the ones it left out.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from metax_core.errors import NotFound
from metax_core.ports.cluster import RawObject
from metax_k8s import retry
from metax_k8s.api import Api
from metax_k8s.objects import retrying

log = logging.getLogger(__name__)


class K8sNodeMetadata:
    """The `NodeMetadata` port over any `Api`. A missing node raises `NotFound` on patch."""

    def __init__(
        self, api: Api, *, field_manager: str = "metax-operator", policy: retry.RetryPolicy | None = None
    ) -> None:
        self.api = retrying(api, policy)
        self.field_manager = field_manager

    def get_node(self, name: str) -> RawObject | None:
        try:
            return self.api.get("v1", "Node", name)
        except NotFound:
            return None

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        metadata: dict[str, Any] = {}
        if labels:
            metadata["labels"] = dict(labels)
        if annotations:
            metadata["annotations"] = dict(annotations)
        if not metadata:
            return
        log.debug("node %s: patching %s", name, metadata)
        self.api.merge_patch("v1", "Node", name, {"metadata": metadata}, field_manager=self.field_manager)
