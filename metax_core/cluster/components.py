"""The component catalogue (C2–C10) and their dependency graph (R-DEP, §3.2.3).

The operator deploys a component only when it is enabled and every prerequisite is deployable; everything
else is reported with the exact reason (which prerequisite is disabled, or itself blocked), never left as a
silent half-install. Deploy order is a topological order that keeps the catalogue order among equals, so
it is the same on every run.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # annotations only: the agents' settings import this module (the exporter's memory)
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
    kind: WorkloadKind
    privileged: bool
    host_pid: bool
    service_account: str | None
    """None: the namespace's default ServiceAccount (data-exporter, as Table 1.3.1 says), without a token."""
    memory_mib: tuple[int, int] = (64, 128)
    """Its container's default memory request and limit (issue 38 item 5): the peak RSS measured in its pod (P8,
    benchmarks/RESULTS.md) rounded up for the request, about twice that for the limit; those that copy payloads or
    scale with the cluster get more. ``resources`` in its spec section sets others."""
    everywhere: bool = False
    """A DaemonSet that runs on every node, not only where ``gpu.installed`` is set: gpu-discovery, which sets it."""
    publishes_readiness: bool = True
    """Its agent publishes the component's readiness signal and answers the uninstall request on its node
    (`metax_core.cluster.node_undos`). False: gpu-discovery, which writes one label and nothing on the host."""


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
    component: Component
    title: str
    prerequisites: tuple[Component, ...]
    workloads: tuple[Workload, ...]
    probe: ReadinessProbe | None = None
    """The readinessProbe of its DaemonSet's pods; None: none yet (the component has no agent code)."""

    @property
    def signal(self) -> str:
        """The name this component's node agent publishes its readiness under (`metax_core.node.readiness`)."""
        return self.title


def _ds(
    name: str,
    *,
    privileged: bool = True,
    host_pid: bool = False,
    own_sa: bool = True,
    memory: tuple[int, int] = (64, 128),
) -> Workload:
    return Workload(name, WorkloadKind.DAEMON_SET, privileged, host_pid, name if own_sa else None, memory)


GPU_DISCOVERY = Workload(
    "metax-gpu-discovery",
    WorkloadKind.DAEMON_SET,
    privileged=False,
    host_pid=False,
    service_account="metax-gpu-discovery",
    memory_mib=(48, 128),
    everywhere=True,
    publishes_readiness=False,
)
"""gpu-label's unprivileged half (issue 38 item 3): on every node, it reads which PCI functions are MetaX GPUs from
``/sys`` (world-readable) and sets ``gpu.installed`` where there are some; every privileged agent, gpu-label's
own included, selects that label, so nothing privileged runs on a node without MetaX GPUs (the control plane's
included). Why not node-feature-discovery's PCI label: the operator would then not work on a cluster without it,
and its label names the vendor id, not what the product found (docs/security.md "What runs where")."""


def _deploy(name: str, memory: tuple[int, int] = (64, 256)) -> Workload:
    return Workload(name, WorkloadKind.DEPLOYMENT, False, False, name, memory)


C = Component
CATALOGUE: tuple[ComponentInfo, ...] = (
    ComponentInfo(C.GPU_LABEL, "gpu-label", (), (GPU_DISCOVERY, _ds("metax-gpu-label", memory=(48, 128))), AGENT_PROBE),
    ComponentInfo(
        C.RUNTIME, "container-runtime", (C.GPU_LABEL,), (_ds("metax-container-runtime", host_pid=True),), AGENT_PROBE
    ),
    ComponentInfo(
        C.DRIVER,
        "driver",
        (C.GPU_LABEL, C.RUNTIME),
        (_ds("metax-driver", host_pid=True, memory=(48, 256)),),
        AGENT_PROBE,
    ),
    ComponentInfo(
        C.MACA, "maca", (C.GPU_LABEL, C.RUNTIME), (_ds("metax-maca", host_pid=True, memory=(48, 256)),), AGENT_PROBE
    ),
    ComponentInfo(
        C.GPU_DEVICE,
        "gpu-device",
        (C.GPU_LABEL, C.RUNTIME, C.MACA),
        (_ds("metax-gpu-device", host_pid=True),),
        AGENT_PROBE,
    ),
    ComponentInfo(
        C.EXPORTER, "data-exporter", (C.GPU_LABEL, C.DRIVER), (_ds("metax-data-exporter", own_sa=False),), AGENT_PROBE
    ),
    ComponentInfo(
        C.VFIO_MANAGER, "vfio-manager", (C.GPU_LABEL,), (_ds("metax-vfio-manager", memory=(48, 128)),), AGENT_PROBE
    ),
    ComponentInfo(
        C.TOPO, "topo", (C.GPU_LABEL,), (_deploy("metax-topo-master"), _ds("metax-topo-worker")), AGENT_PROBE
    ),
    ComponentInfo(C.GPU_SCHEDULER, "gpu-scheduler", (C.GPU_LABEL, C.TOPO), (_deploy("metax-gpu-scheduler"),)),
    # R-DRA: the device plugin's alternative on the nodes the allocation setting gives it (metax_core.node.allocation),
    # so it waits for what gpu-device waits for. No hostPID: it reads the kubelet's PodResources over its socket.
    ComponentInfo(
        C.DRA_DRIVER, "dra-driver", (C.GPU_LABEL, C.RUNTIME, C.MACA), (_ds("metax-dra-driver"),), AGENT_PROBE
    ),
)
BY_COMPONENT: Mapping[Component, ComponentInfo] = {info.component: info for info in CATALOGUE}

DRIVER_DAEMONSET = BY_COMPONENT[Component.DRIVER].workloads[0].name
"""The driver's DaemonSet: the one workload the rollout stamps and drives (R-ROLLOUT, `metax_core.rollout.fleet`)."""

OPERATOR_WORKLOAD = _deploy("metax-operator")
"""C1, deployed by the chart itself (not rendered by the operator)."""


def component_spec(s: spec.ClusterOperatorSpec, component: Component) -> spec.ComponentSpec:
    """The spec section of ``component``."""
    sections: dict[Component, spec.ComponentSpec] = {
        C.GPU_LABEL: s.gpu_label,
        C.RUNTIME: s.runtime,
        C.DRIVER: s.driver,
        C.MACA: s.maca,
        C.GPU_DEVICE: s.gpu_device,
        C.EXPORTER: s.exporter,
        C.VFIO_MANAGER: s.vfio_manager,
        C.TOPO: s.topo,
        C.GPU_SCHEDULER: s.gpu_scheduler,
        C.DRA_DRIVER: s.dra_driver,
    }
    return sections[component]


def enabled(s: spec.ClusterOperatorSpec) -> frozenset[Component]:
    return frozenset(c for c in Component if component_spec(s, c).deploy)


def deploy_order(components: Iterable[Component]) -> list[Component]:
    """``components`` with every prerequisite before its dependents; catalogue order breaks ties."""
    wanted = set(components)
    order: list[Component] = []
    placed: set[Component] = set()
    while len(placed) < len(wanted):
        progressed = False
        for info in CATALOGUE:
            c = info.component
            if c in wanted and c not in placed and all(p in placed or p not in wanted for p in info.prerequisites):
                order.append(c)
                placed.add(c)
                progressed = True
        if not progressed:  # pragma: no cover - the catalogue is acyclic, a test proves it
            raise AssertionError("dependency cycle in the component catalogue")
    return order


@attrs.frozen
class Blocked:
    """An enabled component that will not be deployed, and why."""

    component: Component
    disabled: tuple[Component, ...]
    """Prerequisites that are switched off."""
    blocked: tuple[Component, ...]
    """Prerequisites that are on but blocked themselves."""

    @property
    def reason(self) -> str:
        parts = []
        if self.disabled:
            parts.append("disabled prerequisite " + ", ".join(f"{c.value}" for c in self.disabled))
        if self.blocked:
            parts.append("blocked prerequisite " + ", ".join(f"{c.value}" for c in self.blocked))
        return f"{self.component.value} is enabled but not deployed: " + "; ".join(parts)


@attrs.frozen
class DeployPlan:
    deploy: tuple[Component, ...]
    """In deploy order."""
    blocked: tuple[Blocked, ...]
    disabled: tuple[Component, ...]


def plan(enabled_components: Iterable[Component]) -> DeployPlan:
    """Which enabled components can be deployed (all prerequisites deployable) and which cannot, and why."""
    on = set(enabled_components)
    deployable: set[Component] = set()
    blocked: list[Blocked] = []
    for c in deploy_order(Component):
        if c not in on:
            continue
        prereqs = BY_COMPONENT[c].prerequisites
        disabled = tuple(p for p in prereqs if p not in on)
        stuck = tuple(p for p in prereqs if p in on and p not in deployable)
        if disabled or stuck:
            blocked.append(Blocked(c, disabled, stuck))
        else:
            deployable.add(c)
    return DeployPlan(
        deploy=tuple(deploy_order(deployable)),
        blocked=tuple(blocked),
        disabled=tuple(c for c in Component if c not in on),
    )


def requirements(component: Component, deployed: Iterable[Component]) -> tuple[Component, ...]:
    """Components that must report ready on a node before ``component`` may serve there (R-READY).

    All prerequisites, transitively; for gpu-device and the DRA driver also the driver when it is deployed,
    because GPUs without a working kernel driver must not be advertised (as devices or in ResourceSlices).
    """
    present = set(deployed)
    needed: set[Component] = set()
    stack = list(BY_COMPONENT[component].prerequisites)
    if component in (C.GPU_DEVICE, C.DRA_DRIVER) and C.DRIVER in present:
        stack.append(C.DRIVER)
    while stack:
        c = stack.pop()
        if c not in needed:
            needed.add(c)
            stack.extend(BY_COMPONENT[c].prerequisites)
    return tuple(c for c in deploy_order(needed) if c in present)


def required_signals(component: Component) -> tuple[str, ...]:
    """The readiness signals ``component``'s agent waits for when every component is deployed (its default;
    the operator renders the deployed subset, `requirements`)."""
    return tuple(BY_COMPONENT[c].signal for c in requirements(component, list(Component)))


def signal(component: Component) -> str:
    """The name ``component``'s node agent publishes its readiness under, and readers look up (R-READY)."""
    return BY_COMPONENT[component].signal
