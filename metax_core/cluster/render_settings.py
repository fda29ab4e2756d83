"""What the render needs besides the spec (`metax_core.cluster.workloads.render`): where it runs, which release it
is, and what the cluster serves."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from metax_core import release
from metax_core.spec import model as spec

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
"""The Prometheus Operator's CRD: the operator renders a ServiceMonitor only while the cluster has it."""


@attrs.frozen
class RenderSettings:
    """What the render needs besides the spec: where it runs and which operator version it is."""

    namespace: str = spec.NAMESPACE
    version: str = attrs.field(factory=release.running)
    """The component images' tag: this build's release unless the operator's environment names another."""
    image_pull_policy: str = "IfNotPresent"
    host_path_prefix: str = ""
    """TEST ONLY (chart value ``operator.testOnly.hostPathPrefix``, docs/realnode.md): a directory put in front of
    every hostPath the node agents mount, so that a test node's agents see a fake GPU host there instead of the
    node's own ``/sys``, ``/dev``, ... The product's default is "" (the real paths)."""
    service_monitor: bool = False
    """Whether the cluster serves ServiceMonitors (the operator looks for `SERVICE_MONITOR_CRD`)."""
    image_digests: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    """Image name -> manifest digest of the release (`image_refs`): each component image pinned by digest."""
