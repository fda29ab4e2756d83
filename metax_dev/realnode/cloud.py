"""A stand-in cloud controller: gives a real test node its loopback address and lets it schedule.

Why this module exists: the kubelet refuses 127.0.0.1 as its node address, and this machine has no
other address that may be used. Started with ``--cloud-provider=external``, the kubelet registers its
Node with the ``node.cloudprovider.kubernetes.io/uninitialized`` taint and leaves the addresses to a
cloud controller. This module does that controller's part, once per node: ``status.addresses`` becomes
exactly ``InternalIP 127.0.0.1`` (no ``Hostname`` address, which the API server would otherwise dial
for logs and exec, and which does not resolve), then the taint is removed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from metax_dev.controlplane import network

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

UNINITIALIZED_TAINT: Final = "node.cloudprovider.kubernetes.io/uninitialized"


def initialize(api: ApiClient, node_name: str, *, attempts: int = 20) -> None:
    """Set the node's address to 127.0.0.1 only and remove the uninitialized taint.

    The taint is removed with a JSON patch guarded by the resourceVersion it was read at; when the
    kubelet updated the Node in between (the guard fails with 409/422), it is read and tried again.
    """
    from kubernetes import client as kube
    from kubernetes.client.exceptions import ApiException

    core = kube.CoreV1Api(api)
    addresses = [{"type": "InternalIP", "address": network.LOOPBACK}]
    core.patch_node_status(node_name, [{"op": "add", "path": "/status/addresses", "value": addresses}])
    for attempt in range(attempts):
        node: Any = core.read_node(node_name)
        taints = [t for t in (node.spec.taints or []) if t.key != UNINITIALIZED_TAINT]
        if len(taints) == len(node.spec.taints or []):
            return
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version}
        try:
            core.patch_node(
                node_name, [guard, {"op": "add", "path": "/spec/taints", "value": [_taint(t) for t in taints]}]
            )
            return
        except ApiException as exc:
            if exc.status not in (409, 422) or attempt == attempts - 1:
                raise
            time.sleep(0.05)


def _taint(taint: Any) -> dict[str, str]:
    body = {"key": taint.key, "effect": taint.effect}
    if taint.value is not None:
        body["value"] = taint.value
    if taint.time_added is not None:
        body["timeAdded"] = taint.time_added.strftime("%Y-%m-%dT%H:%M:%SZ")
    return body


def initialized(api: ApiClient, node_name: str) -> bool:
    """Whether the node has exactly the loopback address and no uninitialized taint."""
    from kubernetes import client as kube

    node: Any = kube.CoreV1Api(api).read_node(node_name)
    addresses = [(a.type, a.address) for a in (node.status.addresses or [])]
    tainted = any(t.key == UNINITIALIZED_TAINT for t in (node.spec.taints or []))
    return addresses == [("InternalIP", network.LOOPBACK)] and not tainted
