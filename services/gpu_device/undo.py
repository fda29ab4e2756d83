"""gpu-device's part of the uninstall (R-INSTALL): stop offering devices, remove what it put on the host.

Why a module of its own: gpu-device is the agent whose files other processes read (kubelet dials its
plugin sockets, the container runtime reads its CDI spec), so its undo is the reverse of its start: every
plugin server stops (its socket is removed, kubelet sees the streams end and the resources go to 0), the
CDI spec is removed, and the answer goes on the Node (`metax_core.node.uninstall`). It writes nothing when
the answer is already there, so an agent still running after it answered is quiet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from metax_core.errors import ClusterError, HardwareError
from metax_core.node import publish, uninstall
from metax_core.ports import node as node_ports
from metax_core.ports.cluster import NodeMetadata

log = logging.getLogger(__name__)

AGENT = "gpu-device"


def undo(plugins: dict[Any, node_ports.ResourcePlugin], cdi_file: node_ports.CdiSink | None) -> list[str]:
    """Stop every plugin server and remove the CDI spec; returns what stays and why."""
    kept: list[str] = []
    for resource in list(plugins):
        plugins.pop(resource).stop()
    if cdi_file is not None:
        try:
            cdi_file.remove()
        except HardwareError as exc:
            kept.append(f"CDI spec: {exc.detail}")
    return kept


def answer(
    nodes: NodeMetadata, node_name: str, node: Mapping[str, Any] | None, uid: str, kept: list[str]
) -> Mapping[str, Any] | None:
    """Answer ``uid`` while ``node`` (as last read) carries the request: after the finalizer removed it, an
    answer would be a key left behind. Returns the node as it is after the answer (for the next tick's diff)."""
    if uninstall.requested(publish.node_metadata(node)[1]) != uid:
        return node
    wanted = uninstall.render_done(AGENT, uninstall.Done(uid, tuple(kept)))
    patch = publish.changes(publish.node_metadata(node)[1], dict(wanted))
    if not patch:
        return node
    try:
        nodes.patch_node_metadata(node_name, annotations=patch)
    except ClusterError as exc:
        log.warning("cannot answer the uninstall on node %s: %s", node_name, exc)
        return node
    metadata = dict((node or {}).get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **wanted}
    log.info("uninstall: plugin servers stopped, CDI spec removed%s", f", kept: {kept}" if kept else "")
    return {**(node or {}), "metadata": metadata}
