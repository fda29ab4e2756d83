"""The host's paths the product's processes share, spelled once (issue 43 item 1, 000 §1.3.2).

Why here: a host directory is a name two processes agree on, like a label. The operator mounts it into a pod
(`metax_core.components.catalogue` declares which workload sees which, `metax_core.cluster.host_paths` renders the
volumes), and the agent inside reads or writes under it; the kubelet, containerd and CRI-O read the same
directories. A path spelled in one place cannot be mounted under one name and looked for under another.

Paths are absolute on the host. A node agent sees each under `HOST_ROOT_IN_CONTAINER` (its ``METAX_HOST_ROOT``);
adapters that take a host root join the path to it without the leading slash (`relative`).
"""

from __future__ import annotations

HostPath = tuple[str, bool]
"""A host directory a workload mounts, and whether read-only."""

HOST_ROOT_IN_CONTAINER = "/host"
"""Where a node agent's pod sees the host's directories (each mounted at the same path under it)."""

# -- the host's own directories -----------------------------------------------------------------------------
DEV = "/dev"
SYS = "/sys"
KERNEL_MODULES = "/lib/modules"
FIRMWARE = "/lib/firmware"
CONTAINERD_CONFIG_DIR = "/etc/containerd"
DOCKER_CONFIG_DIR = "/etc/docker"
CRIO_CONFIG_DIR = "/etc/crio"
CONTAINERD_CONFIG = CONTAINERD_CONFIG_DIR + "/config.toml"
"""containerd's root config file (container-runtime edits it, containerd reads it)."""
DOCKER_CONFIG = DOCKER_CONFIG_DIR + "/daemon.json"
"""dockerd's config file (container-runtime edits it, dockerd reads it)."""
DRI_DIR = DEV + "/dri"
"""The GPUs' DRM nodes (``card*``, ``renderD*``), handed to containers."""
MXCD = DEV + "/mxcd"
"""MetaX's control device node, handed to every GPU container."""
VFIO_DIR = DEV + "/vfio"
"""The IOMMU groups' nodes of vfio-bound GPUs (``<group>``, ``noiommu-<group>``)."""
VFIO_CONTAINER = VFIO_DIR + "/vfio"
"""The VFIO container node every holder of a vfio-bound GPU needs."""
NET_CLASS_DIR = SYS + "/class/net"
"""The network interfaces (gpu-label's and topo-worker's topology reads)."""
CGROUP_DIR = SYS + "/fs/cgroup"
"""The cgroup v2 hierarchy (the dev tooling's real nodes share it with the runtimes)."""

# -- the kubelet's --------------------------------------------------------------------------------------------
DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
"""The device plugin API's sockets (kubelet.sock and ours)."""
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
"""The kubelet's PodResources socket: which pod holds which device."""
POD_RESOURCES_SOCKET = POD_RESOURCES_DIR + "/kubelet.sock"
PLUGINS_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
"""Where a DRA driver registers itself with the kubelet."""
PLUGINS_DIR = "/var/lib/kubelet/plugins"
"""Where a DRA driver's own socket lives."""

# -- shared with the container runtimes ---------------------------------------------------------------------
CDI_DIR = "/var/run/cdi"
"""The Container Device Interface's spec directory: gpu-device and the DRA driver write, containerd and CRI-O read
(and container-edit, for the device numbers on containerd 1.6)."""

# -- the product's own ------------------------------------------------------------------------------------------
STATE_DIR = "/var/lib/metax"
"""What stays across reboots: the driver payload's current version and tools, the SDK versions, first-touch
records."""
RUN_DIR = "/run/metax"
"""What lives until reboot: the readiness board, the in-use records, the edit socket."""
LOG_DIR = "/var/log/metax"
READINESS_DIR = RUN_DIR + "/ready"
"""The readiness board the node agents coordinate through (`metax_core.node.readiness`): one file per signal."""


def relative(path: str) -> str:
    """``path`` without its leading slash: what an adapter joins to a host root (``/host``, a fake host's dir)."""
    return path.lstrip("/")
