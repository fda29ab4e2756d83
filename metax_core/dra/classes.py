"""The DeviceClasses of the MetaX DRA driver and the device attribute they select on (R-DRA, docs/dra.md).

Why one module: the ResourceSlice publisher writes every device's ``type`` attribute under `ATTRIBUTE_DOMAIN`
and the operator renders the DeviceClasses whose CEL selectors read it back; both use these constants, so a
class can never select on an attribute the slices do not carry. A vfio-bound GPU (for virtual machines,
R-VFIO) is a device of the same driver that a container must never get, hence two disjoint classes: every
device of the driver is in exactly one of them.

`GPU_CLASS` also names the extended resource ``metax-tech.com/gpu`` (``spec.extendedResourceName``, the
DRAExtendedResource feature): on a node the DRA driver serves, a pod's plain ``metax-tech.com/gpu: N`` limit
is allocated from this class by the scheduler, as the device plugin would have served it elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.dra import DRIVER, VFIO_DRIVER
from metax_core.node import devices as plugin_devices

API_VERSION = "resource.k8s.io/v1"
KIND = "DeviceClass"

ATTRIBUTE_DOMAIN = DRIVER
"""The domain of the driver's own device attributes (``device.attributes["gpu.metax-tech.com"]``)."""
TYPE_ATTRIBUTE = "type"
"""What a device is: one of `TYPE_GPU`, `TYPE_VF`, `TYPE_VFIO`."""
TYPE_GPU = "gpu"
"""A whole GPU (physical function) bound to the metax driver."""
TYPE_VF = "vf"
"""An SR-IOV virtual function bound to the metax driver."""
TYPE_VFIO = "vfio"
"""A GPU bound to vfio-pci, for a virtual machine (R-VFIO)."""
TYPES = (TYPE_GPU, TYPE_VF, TYPE_VFIO)

GPU_CLASS = DRIVER
"""Containers' GPUs and VFs: every device of the driver except vfio-bound ones."""
VFIO_CLASS = VFIO_DRIVER
"""vfio-bound GPUs only."""
EXTENDED_RESOURCE = plugin_devices.Resource.GPU.value
"""The device plugin's resource name, which `GPU_CLASS` serves on DRA nodes."""


def _type_is(operator: str) -> str:
    attribute = f'device.attributes["{ATTRIBUTE_DOMAIN}"].{TYPE_ATTRIBUTE}'
    return f'device.driver == "{DRIVER}" && {attribute} {operator} "{TYPE_VFIO}"'


SELECTORS: Mapping[str, str] = {GPU_CLASS: _type_is("!="), VFIO_CLASS: _type_is("==")}
"""Each class's CEL selector (the API server compiles it when the class is created)."""


def spec_of(name: str) -> dict[str, Any]:
    """The ``spec`` of the DeviceClass ``name`` (one of `SELECTORS`)."""
    body: dict[str, Any] = {"selectors": [{"cel": {"expression": SELECTORS[name]}}]}
    if name == GPU_CLASS:
        body["extendedResourceName"] = EXTENDED_RESOURCE
    return body
