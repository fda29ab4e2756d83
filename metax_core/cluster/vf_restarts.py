"""Which gpu-device pods the operator recreates after an edit of ``driver-config`` (R-VF).

Why it exists: a gpu-device pod advertises its node's GPUs as they were split when it started, so when a node's
VF count changes its pod must start again. The operator records, per node, the count its gpu-device pod was
started with (``status.vfNums`` of cluster-operator) and deletes the pod of each node whose count in
``driver-config`` now differs; the DaemonSet controller starts the new one. This is that decision, pure, so the
operator (`services.operator.reconciler`) and ``metax-operator diff --driver-config`` (which predicts it,
`metax_core.cluster.diff_driver_config`) call the same function. A node's count is what driver-manager applies:
`driver_config.for_node` (the one resolution of a node's entry, 0 when unlisted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.components import Component
from metax_core.errors import InvalidSpec
from metax_core.node import driver_config
from metax_core.wire import meta


@attrs.frozen
class GpuDevicePod:
    name: str
    node: str
    terminating: bool = False


@attrs.frozen
class Recreation:
    """The gpu-device pod ``pod`` on ``node`` is deleted (its DaemonSet starts a new one): count ``old`` → ``new``."""

    node: str
    pod: str
    old: int
    new: int


@attrs.frozen
class VfDecision:
    recreate: tuple[Recreation, ...]
    seen: Mapping[str, int]
    """Node → the count its gpu-device pod runs with after this round (what ``status.vfNums`` records)."""


def config_or_empty(data: Mapping[str, object] | None) -> driver_config.DriverConfig:
    """``driver-config`` data parsed; a broken ConfigMap counts as "no VFs anywhere" (for what ``diff`` shows as
    the old values: driver-manager keeps the last valid one it read, which no other process can see)."""
    return config_or_none(data) or driver_config.DriverConfig()


def config_or_none(data: Mapping[str, object] | None) -> driver_config.DriverConfig | None:
    """``driver-config`` data parsed, or None when it does not parse (a missing ConfigMap is an empty one, as
    driver-manager reads it)."""
    try:
        return driver_config.parse(data)
    except InvalidSpec:
        return None


def gpu_device_pods(pods: Iterable[Mapping[str, Any]]) -> list[GpuDevicePod]:
    """The gpu-device pods (by the component label, `metax_core.wire.meta`) bound to a node."""
    found = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if (metadata.get("labels") or {}).get(meta.COMPONENT_LABEL) != Component.GPU_DEVICE.value or not node:
            continue
        found.append(GpuDevicePod(str(metadata["name"]), str(node), bool(metadata.get("deletionTimestamp"))))
    return found


def decide(
    config: driver_config.DriverConfig | None, recorded: Mapping[str, int], pods: Sequence[GpuDevicePod]
) -> VfDecision:
    """Recreate the pod of each node whose recorded count differs from ``config``'s (a node not recorded yet —
    its pod just started with the current count — and a pod already terminating are left alone).

    ``config`` None: ``driver-config`` does not parse. driver-manager then keeps the last valid one it read and
    changes no VF, so no pod is recreated and every recorded count stays (a broken edit costs no workload its
    device plugin; the webhook refuses such an edit where it is installed)."""
    recreate: list[Recreation] = []
    seen: dict[str, int] = {}
    if config is None:
        return VfDecision((), {pod.node: recorded[pod.node] for pod in pods if pod.node in recorded})
    for pod in pods:
        want = driver_config.for_node(config, pod.node).vfnum
        seen[pod.node] = want
        if pod.node in recorded and recorded[pod.node] != want and not pod.terminating:
            recreate.append(Recreation(pod.node, pod.name, recorded[pod.node], want))
    return VfDecision(tuple(recreate), seen)
