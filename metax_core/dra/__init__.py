"""Dynamic Resource Allocation (R-DRA): MetaX GPUs offered as ResourceSlices and prepared per claim.

`model` holds the words both sides of the kubelet's DRA protocol use (a claim reference, a prepared
device, a claim's outcome, a device's health); the other modules are the driver's decisions: which devices
a node publishes and how they split into slices, what a claim's allocation and configuration say, the CDI
spec a prepared claim gets, and the checkpoint that lets prepared claims survive a restart.
"""

DRIVER = "gpu.metax-tech.com"
"""The DRA driver's name: a DNS subdomain, the ResourceSlices' ``spec.driver`` and the DeviceClass's name."""

VFIO_DRIVER = "vfio-gpu.metax-tech.com"
"""DeviceClass of vfio-bound GPUs (for KubeVirt, R-VFIO); served by the same driver under its own pool."""
