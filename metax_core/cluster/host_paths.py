"""The host paths the node agents mount (000 §1.3.2), which workload mounts which, and how they are rendered.

Why a module of its own: which host directories a privileged pod sees is the security surface an administrator
reviews (R-SECURITY); it is one table, checked against the seed's list (`ALLOWED_HOST_PATHS`), and one render
(every path under `HOST_ROOT_IN_CONTAINER`, the host side under a test-only prefix), apart from the rest of a
workload's manifest (`metax_core.cluster.workloads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.cluster.components import Workload

# Host paths of 000 §1.3.2, and which workload mounts which (read-only where the agent only reads).
HostPath = tuple[str, bool]  # (path, read_only)
_LOG = ("/var/log/metax", False)
_RUN = ("/run/metax", False)
_TOOLS = ("/var/lib/metax", True)  # the running driver's mx-smi, libmxsml (`payload_layout.HOST_CURRENT`), read only
HOST_PATHS: Mapping[str, tuple[HostPath, ...]] = {
    # The PCI functions' vendor and device ids, world-readable: gpu-discovery needs nothing else of the host.
    "metax-gpu-discovery": (("/sys", True),),
    "metax-gpu-label": (("/sys", True), ("/dev", True), _TOOLS, _RUN, _LOG),
    "metax-container-runtime": (
        ("/etc/containerd", False),
        ("/etc/docker", False),
        ("/etc/crio", False),
        ("/var/lib/metax", False),
        _RUN,
        _LOG,
    ),
    "metax-driver": (
        ("/dev", False),
        ("/sys", False),
        ("/lib/modules", True),
        ("/lib/firmware", False),
        ("/var/lib/metax", False),
        _RUN,
        _LOG,
    ),
    # /var/lib/metax: the SDK versions; /run/metax: the in-use records, the edit socket, readiness; /dev and
    # /var/run/cdi read-only: the edit service's device numbers and CDI spec (containerd 1.6, docs/maca.md).
    "metax-maca": (("/var/lib/metax", False), _RUN, _LOG, ("/dev", True), ("/var/run/cdi", True)),
    "metax-gpu-device": (
        ("/dev", False),
        ("/sys", True),
        ("/var/lib/kubelet/device-plugins", False),
        ("/var/lib/kubelet/pod-resources", True),
        ("/var/run/cdi", False),
        _TOOLS,
        _RUN,
        _LOG,
    ),
    # gpu-device's host facts, plus the kubelet's plugin registration and DRA plugin socket directories (R-DRA).
    "metax-dra-driver": (
        ("/dev", False),
        ("/sys", True),
        ("/var/lib/kubelet/plugins_registry", False),
        ("/var/lib/kubelet/plugins", False),
        ("/var/lib/kubelet/pod-resources", True),
        ("/var/run/cdi", False),
        _TOOLS,
        _RUN,
        _LOG,
    ),
    "metax-data-exporter": (("/dev", True), ("/sys", True), ("/var/lib/kubelet/pod-resources", True), _TOOLS, _LOG),
    "metax-vfio-manager": (("/dev", False), ("/sys", False), ("/lib/modules", True), _RUN, _LOG),
    "metax-topo-worker": (
        ("/sys", True),
        ("/dev", True),
        ("/var/lib/kubelet/pod-resources", True),
        _TOOLS,
        _RUN,
        _LOG,
    ),
}
ALLOWED_HOST_PATHS = frozenset(
    {
        "/dev",
        "/sys",
        "/lib/modules",
        "/lib/firmware",
        "/etc/docker",
        "/etc/containerd",
        "/etc/crio",
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/pod-resources",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
        "/var/lib/metax",
        "/run/metax",
        "/var/log/metax",
    }
)
HOST_ROOT_IN_CONTAINER = "/host"
TEST_FAKE_HOST_DIR = "/.metax-fake"
"""TEST ONLY: a fake GPU host's own directory (its kernel's state; `metax_hw_fake.layout.PRIVATE`). Under a
`RenderSettings.host_path_prefix` the privileged agents also mount it, read-write, so the fake host's tools (the
test driver payload's mx-smi) run inside their pods against the same fake kernel (docs/realnode.md)."""


def volumes(workload: Workload, prefix: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The workload's hostPath volumes, each mounted at the same path under `HOST_ROOT_IN_CONTAINER`; the host
    side under ``prefix`` (`RenderSettings.host_path_prefix`, test only)."""
    volumes, mounts = [], []
    paths = HOST_PATHS.get(workload.name, ())
    if prefix and paths and workload.privileged:
        paths = (*paths, (TEST_FAKE_HOST_DIR, False))
    for path, read_only in paths:
        name = "host" + path.replace("/", "-").replace("_", "-").replace(".", "-")  # a DNS label (plugins_registry)
        host_path = prefix.rstrip("/") + path
        volumes.append({"name": name, "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}})
        mounts.append({"name": name, "mountPath": HOST_ROOT_IN_CONTAINER + path, "readOnly": read_only})
    return volumes, mounts
