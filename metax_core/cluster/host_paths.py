"""The host paths the node agents mount (000 §1.3.2), which workload mounts which, and how they are rendered.

Why a module of its own: which host directories a privileged pod sees is the security surface an administrator
reviews (R-SECURITY); each workload declares its own (`metax_core.components.catalogue`), gathered here in one
table, checked against the seed's list (`ALLOWED_HOST_PATHS`), and one render
(every path under `HOST_ROOT_IN_CONTAINER`, the host side under a test-only prefix), apart from the rest of a
workload's manifest (`metax_core.cluster.workloads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core import components
from metax_core.components import Workload
from metax_core.wire import host

HostPath = host.HostPath
HOST_PATHS: Mapping[str, tuple[HostPath, ...]] = {
    name: w.host_paths for name, w in components.WORKLOADS.items() if w.host_paths
}
"""Which workload mounts which host path (read-only where the agent only reads): each workload's declaration."""
ALLOWED_HOST_PATHS = frozenset(
    {
        host.DEV,
        host.SYS,
        host.KERNEL_MODULES,
        host.FIRMWARE,
        host.DOCKER_CONFIG_DIR,
        host.CONTAINERD_CONFIG_DIR,
        host.CRIO_CONFIG_DIR,
        host.DEVICE_PLUGINS_DIR,
        host.POD_RESOURCES_DIR,
        host.PLUGINS_REGISTRY_DIR,
        host.PLUGINS_DIR,
        host.CDI_DIR,
        host.STATE_DIR,
        host.RUN_DIR,
        host.LOG_DIR,
    }
)
"""The seed's list (000 §1.3.2): no workload may declare a host path outside it."""
HOST_ROOT_IN_CONTAINER = host.HOST_ROOT_IN_CONTAINER
TEST_FAKE_HOST_DIR = "/.metax-fake"
"""TEST ONLY: a fake GPU host's own directory (its kernel's state; `metax_hw_fake.layout.PRIVATE`). Under a
`RenderSettings.host_path_prefix` the privileged agents also mount it, read-write, so the fake host's tools (the
test driver payload's mx-smi) run inside their pods against the same fake kernel (docs/realnode.md)."""


def volumes(workload: Workload, prefix: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The workload's hostPath volumes, each mounted at the same path under `HOST_ROOT_IN_CONTAINER`; the host
    side under ``prefix`` (`RenderSettings.host_path_prefix`, test only)."""
    volumes, mounts = [], []
    paths = workload.host_paths
    if prefix and paths and workload.privileged:
        paths = (*paths, (TEST_FAKE_HOST_DIR, False))
    for path, read_only in paths:
        name = "host" + path.replace("/", "-").replace("_", "-").replace(".", "-")  # a DNS label (plugins_registry)
        host_path = prefix.rstrip("/") + path
        volumes.append({"name": name, "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}})
        mounts.append({"name": name, "mountPath": HOST_ROOT_IN_CONTAINER + path, "readOnly": read_only})
    return volumes, mounts
