"""What the operator renders for Dynamic Resource Allocation (R-DRA, docs/dra.md), besides the DaemonSet itself.

Two things: the DeviceClasses (cluster-scoped, applied with the dra-driver component and pruned without it,
like the RuntimeClass ``metax`` with container-runtime), and the node affinity that splits the GPU nodes
between the device plugin and the DRA driver (`metax_core.node.allocation` decides; this only puts its
requirement into the two pod templates). With ``draDriver.deploy`` false nothing here is rendered and
gpu-device's pods are exactly what they were before DRA existed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from metax_core.components import Component
from metax_core.dra import classes
from metax_core.node import allocation
from metax_core.spec import model as spec
from metax_core.wire import meta

ALLOCATORS: Mapping[Component, allocation.Allocator] = {
    Component.GPU_DEVICE: allocation.Allocator.DEVICE_PLUGIN,
    Component.DRA_DRIVER: allocation.Allocator.DRA,
}
"""The component behind each allocator."""


def placed(
    s: spec.ClusterOperatorSpec, component: Component, pod_spec: Mapping[str, Any], deployed: Collection[Component]
) -> dict[str, Any]:
    """``pod_spec`` (already merged with the administrator's overrides) with the allocation requirement of
    ``component`` when the DRA driver is deployed; unchanged otherwise, and for every other component."""
    allocator = ALLOCATORS.get(component)
    if allocator is None or Component.DRA_DRIVER not in deployed:
        return dict(pod_spec)
    expression = allocation.requirement(s.dra_driver.default_allocation, allocator)
    return allocation.require(pod_spec, expression)


def device_class(name: str) -> dict[str, Any]:
    """The DeviceClass ``name`` (`classes.SELECTORS`), labelled as the dra-driver component's."""
    return {
        "apiVersion": classes.API_VERSION,
        "kind": classes.KIND,
        "metadata": {
            "name": name,
            "labels": {
                meta.APP_LABEL: name,
                meta.COMPONENT_LABEL: Component.DRA_DRIVER.value,
                meta.MANAGED_BY_LABEL: meta.MANAGED_BY,
                meta.PART_OF_LABEL: meta.PART_OF,
            },
        },
        "spec": classes.spec_of(name),
    }


def device_classes() -> list[dict[str, Any]]:
    """Both DeviceClasses, the containers' one first."""
    return [device_class(classes.GPU_CLASS), device_class(classes.VFIO_CLASS)]
