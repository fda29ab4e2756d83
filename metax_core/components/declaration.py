"""What a component declares about itself: its workloads (with their privileges, host paths, permissions and
command), its readiness probe, the spec-fed environment its agent reads, and whether it undoes on uninstall.

Why records: every table the operator renders from — volumes, RBAC, environment, probes, the uninstall protocol's
answering agents — is derived from these fields (`metax_core.components.catalogue`), so a component is one record,
and a field left out is a type error or a test failure, not a pod that silently mounts nothing
(docs/contributing.md, "Adding a component").
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from metax_core.components.access import Access
from metax_core.wire.agent_env import Var
from metax_core.wire.host import HostPath

if TYPE_CHECKING:  # annotations only: the agents' settings import this package (the exporter's memory)
    from metax_core.spec import model as spec


class Component(enum.Enum):
    """A component by its chart key (the key under the ClusterOperator spec)."""

    GPU_LABEL = "gpuLabel"
    RUNTIME = "runtime"
    DRIVER = "driver"
    MACA = "maca"
    GPU_DEVICE = "gpuDevice"
    EXPORTER = "exporter"
    VFIO_MANAGER = "vfioManager"
    TOPO = "topo"
    GPU_SCHEDULER = "gpuScheduler"
    DRA_DRIVER = "draDriver"


class WorkloadKind(enum.Enum):
    DAEMON_SET = "DaemonSet"
    DEPLOYMENT = "Deployment"


@attrs.frozen
class Workload:
    """One workload of a component, with the privileges 000 Table 1.3.1 gives it (R-SECURITY)."""

    name: str
    """The DaemonSet's or Deployment's name, its image's name and (unless ``access`` is None) its ServiceAccount's."""
    kind: WorkloadKind
    command: str
    """The console script its image runs (pyproject's ``[project.scripts]``, images/images.toml's entrypoint)."""
    privileged: bool
    host_pid: bool = False
    access: Access | None = attrs.field(kw_only=True)
    """What its own ServiceAccount may do; None: the namespace's default ServiceAccount, without a token
    (data-exporter, as Table 1.3.1 says). No default: every workload says."""
    host_paths: tuple[HostPath, ...] = attrs.field(default=(), kw_only=True)
    """The host directories it mounts (000 §1.3.2; `metax_core.cluster.host_paths` renders and bounds them). A
    DaemonSet declares at least one (a node agent that needs nothing of its node has no reason to run on each)."""
    memory_mib: tuple[int, int] = attrs.field(default=(64, 128), kw_only=True)
    """Its container's default memory request and limit (issue 38 item 5): the peak RSS measured in its pod (P8,
    benchmarks/RESULTS.md) rounded up for the request, about twice that for the limit; those that copy payloads or
    scale with the cluster get more. ``resources`` in its spec section sets others."""
    everywhere: bool = attrs.field(default=False, kw_only=True)
    """A DaemonSet that runs on every node, not only where ``gpu.installed`` is set: gpu-discovery, which sets it."""
    publishes_readiness: bool = attrs.field(default=True, kw_only=True)
    """Its agent publishes the component's readiness signal and answers the uninstall request on its node
    (`metax_core.cluster.node_undos`). False: gpu-discovery, which writes one label and nothing on the host."""

    def __attrs_post_init__(self) -> None:
        if self.kind is WorkloadKind.DAEMON_SET and not self.host_paths:
            raise ValueError(f"{self.name}: a node agent declares the host paths it mounts")
        if self.kind is WorkloadKind.DEPLOYMENT and self.host_paths:
            raise ValueError(f"{self.name}: a Deployment mounts no host path")

    @property
    def service_account(self) -> str | None:
        """Its own ServiceAccount (named after it), or None: the namespace's default one."""
        return None if self.access is None else self.name


@attrs.frozen
class ReadinessProbe:
    """How the kubelet asks a component's pod whether the component works on its node (R-READY).

    The agent keeps ``file`` exactly while it does its job (`services._agent.probe`); the pod's
    readinessProbe is ``exec: [test, -f, file]`` and the agent learns the path from ``METAX_PROBE_FILE``
    (`metax_core.cluster.workloads`). Declared once per component here, so a new component gets both by
    declaring it.
    """

    file: str = "/tmp/metax-agent-ready"
    period_seconds: int = 5
    failure_threshold: int = 1
    """One failed look is enough: the file is removed only when the agent decided it is not ready."""


AGENT_PROBE = ReadinessProbe()


@attrs.frozen
class ComponentInfo:
    """One component's whole declaration."""

    component: Component
    title: str
    """Its name in the operator's words; also the readiness signal its node agent publishes (`signal`)."""
    spec_field: str
    """Its section of the ClusterOperator spec: the attribute of `metax_core.spec.model.ClusterOperatorSpec`."""
    prerequisites: tuple[Component, ...]
    workloads: tuple[Workload, ...]
    probe: ReadinessProbe | None = None
    """The readinessProbe of its DaemonSet's pods; None: none (a Deployment with its own HTTP probe)."""
    env: tuple[Var, ...] = attrs.field(kw_only=True)
    """The spec-fed variables its agent reads (`metax_core.wire.agent_env`), besides every agent's own; an agent
    that reads any also gets its namespace (where the ConfigMaps live). No default, like ``undoes``: a new
    component says both."""
    undoes: bool = attrs.field(kw_only=True)
    """Its agent undoes what it did on a node when the operator is uninstalled, and answers the request
    (`metax_core.node.uninstall`)."""

    @property
    def signal(self) -> str:
        """The name this component's node agent publishes its readiness under (`metax_core.node.readiness`)."""
        return self.title

    def section(self, s: spec.ClusterOperatorSpec) -> spec.ComponentSpec:
        """Its section of ``s``."""
        section: spec.ComponentSpec = getattr(s, self.spec_field)
        return section
