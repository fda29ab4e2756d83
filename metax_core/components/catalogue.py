"""The component catalogue (C2–C10): one declaration per component, and the lookups derived from it.

Why one table: each record carries everything the rest of the product needs to know about a component — its spec
section, prerequisites (R-DEP), workloads with their privileges, host paths (000 §1.3.2) and permissions (Table
1.3.1, R-SECURITY), command, probe (R-READY), the spec-fed environment its agent reads, and whether it undoes on
uninstall (R-INSTALL). The volumes, RBAC objects, container environment, probes and the uninstall protocol's list
of answering agents are all computed from these records; ``tests/unit/test_catalogue.py`` checks every derived
table and what lives outside the core (console scripts, images, import-linter, the chart) against them.
"""

from __future__ import annotations

from collections.abc import Mapping

from metax_core.components import access
from metax_core.components.access import Access, Rule
from metax_core.components.declaration import (
    AGENT_PROBE,
    Component,
    ComponentInfo,
    Workload,
    WorkloadKind,
)
from metax_core.wire import agent_env as env
from metax_core.wire import host, meta
from metax_core.wire.host import HostPath

_LOG: HostPath = (host.LOG_DIR, False)
_RUN: HostPath = (host.RUN_DIR, False)
_TOOLS: HostPath = (host.STATE_DIR, True)
"""The running driver's mx-smi, libmxsml (`payload_layout.HOST_CURRENT`), read only."""
_NODE = access.NODE_LABELS


def _agent(
    name: str,
    command: str,
    *paths: HostPath,
    rules: Access | None,
    privileged: bool = True,
    host_pid: bool = False,
    memory: tuple[int, int] = (64, 128),
) -> Workload:
    """A node agent's DaemonSet."""
    return Workload(
        name,
        WorkloadKind.DAEMON_SET,
        command,
        privileged,
        host_pid,
        access=rules,
        host_paths=paths,
        memory_mib=memory,
    )


def _deployment(name: str, rules: Access, memory: tuple[int, int] = (64, 256)) -> Workload:
    """An unprivileged controller: no host path, its own ServiceAccount."""
    return Workload(name, WorkloadKind.DEPLOYMENT, name, False, access=rules, memory_mib=memory)


GPU_DISCOVERY = Workload(
    "metax-gpu-discovery",
    WorkloadKind.DAEMON_SET,
    "metax-gpu-discovery",
    privileged=False,
    # The PCI functions' vendor and device ids, world-readable: gpu-discovery needs nothing else of the host.
    host_paths=((host.SYS, True),),
    # On every node: sets gpu.installed on its node where it finds MetaX GPUs (issue 38 item 3).
    access=access.node_agent(_NODE),
    memory_mib=(48, 128),
    everywhere=True,
    publishes_readiness=False,
)
"""gpu-label's unprivileged half (issue 38 item 3): on every node, it reads which PCI functions are MetaX GPUs from
``/sys`` (world-readable) and sets ``gpu.installed`` where there are some; every privileged agent, gpu-label's
own included, selects that label, so nothing privileged runs on a node without MetaX GPUs (the control plane's
included). Why not node-feature-discovery's PCI label: the operator would then not work on a cluster without it,
and its label names the vendor id, not what the product found (docs/security.md "What runs where")."""

DRA_DRIVER_RULES = (
    Rule(access.DRA_API_GROUP, ("resourceslices",), (*access.READ, *access.WRITE)),
    Rule(access.DRA_API_GROUP, ("resourceclaims",), access.READ),
    Rule(access.DRA_API_GROUP, ("deviceclasses",), access.READ),
    # Its Node: the slices' owner, and patch for the uninstall protocol's answer (services/_agent/uninstall.py:
    # every node agent may patch its Node), since it writes host files (CDI specs, its claim checkpoint).
    _NODE,
    Rule("", ("events",), ("create", "patch")),
    Rule("events.k8s.io", ("events",), ("create", "patch")),
)
"""R-DRA: publishes its node's ResourceSlices (one pool per node, removed on uninstall), reads the claims the kubelet
asks it to prepare and the classes they name, reads its Node (the slices' owner); Events about claims live in the
claims' namespaces, hence cluster-wide (create and patch only)."""

C = Component
CATALOGUE: tuple[ComponentInfo, ...] = (
    ComponentInfo(
        C.GPU_LABEL,
        "gpu-label",
        "gpu_label",
        (),
        (
            GPU_DISCOVERY,
            # Reads GPU state on its node, writes node labels (R-LABELS).
            _agent(
                "metax-gpu-label",
                "metax-gpu-label",
                (host.SYS, True),
                (host.DEV, True),
                _TOOLS,
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE),
                memory=(48, 128),
            ),
        ),
        AGENT_PROBE,
        env=(env.SGPU_SHARES,),
        undoes=True,
    ),
    ComponentInfo(
        C.RUNTIME,
        "container-runtime",
        "runtime",
        (C.GPU_LABEL,),
        (
            # Its readiness on its node; the runtimes' configuration directories and the wrapper it installs.
            _agent(
                "metax-container-runtime",
                "metax-container-runtime-agent",
                (host.CONTAINERD_CONFIG_DIR, False),
                (host.DOCKER_CONFIG_DIR, False),
                (host.CRIO_CONFIG_DIR, False),
                (host.STATE_DIR, False),
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE),
                host_pid=True,
            ),
        ),
        AGENT_PROBE,
        env=(env.RUNTIME_RESTART_MODE, env.RUNTIME_SOCKET),
        undoes=True,
    ),
    ComponentInfo(
        C.DRIVER,
        "driver",
        "driver",
        (C.GPU_LABEL, C.RUNTIME),
        (
            # Its node's labels/annotations, the driver-config ConfigMap (R-VF, R-MODPARAM), NodeNeedReboot (R-FW).
            _agent(
                "metax-driver",
                "metax-driver-manager",
                (host.DEV, False),
                (host.SYS, False),
                (host.KERNEL_MODULES, True),
                (host.FIRMWARE, False),
                (host.STATE_DIR, False),
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE, namespace=access.config_map(meta.DRIVER_CONFIG_MAP)),
                host_pid=True,
                memory=(48, 256),
            ),
        ),
        AGENT_PROBE,
        env=(env.DEPLOY_POLICY, env.FW_UPGRADE_POLICY, env.FW_ENABLE_VIRT, env.DRIVER_CONFIG, env.DRIVER_VERSION),
        undoes=True,
    ),
    ComponentInfo(
        C.MACA,
        "maca",
        "maca",
        (C.GPU_LABEL, C.RUNTIME),
        (
            # /var/lib/metax: the SDK versions; /run/metax: the in-use records, the edit socket, readiness; /dev and
            # /var/run/cdi read-only: the edit service's device numbers and CDI spec (containerd 1.6, docs/maca.md).
            _agent(
                "metax-maca",
                "metax-maca",
                (host.STATE_DIR, False),
                _RUN,
                _LOG,
                (host.DEV, True),
                (host.CDI_DIR, True),
                rules=access.node_agent(_NODE),
                host_pid=True,
                memory=(48, 256),
            ),
        ),
        AGENT_PROBE,
        env=(env.CONTAINER_STATE_ROOT,),
        undoes=True,
    ),
    ComponentInfo(
        C.GPU_DEVICE,
        "gpu-device",
        "gpu_device",
        (C.GPU_LABEL, C.RUNTIME, C.MACA),
        (
            # Node mode/QoS labels (R-SGPU) and the HAMi device annotation on its node.
            _agent(
                "metax-gpu-device",
                "metax-gpu-device",
                (host.DEV, False),
                (host.SYS, True),
                (host.DEVICE_PLUGINS_DIR, False),
                (host.POD_RESOURCES_DIR, True),
                (host.CDI_DIR, False),
                _TOOLS,
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE),
                host_pid=True,
            ),
        ),
        AGENT_PROBE,
        env=(env.HEALTHY_INTERVAL, env.SGPU_SHARES),
        undoes=True,
    ),
    ComponentInfo(
        C.EXPORTER,
        "data-exporter",
        "exporter",
        (C.GPU_LABEL, C.DRIVER),
        (
            _agent(
                "metax-data-exporter",
                "metax-data-exporter",
                (host.DEV, True),
                (host.SYS, True),
                (host.POD_RESOURCES_DIR, True),
                _TOOLS,
                _LOG,
                rules=None,
            ),
        ),
        AGENT_PROBE,
        env=(env.SAMPLE_INTERVAL, env.EXPORTED_POD_LABELS),
        undoes=False,
    ),
    ComponentInfo(
        C.VFIO_MANAGER,
        "vfio-manager",
        "vfio_manager",
        (C.GPU_LABEL,),
        (
            # The metax-vfio-config ConfigMap and the gpu-vfio annotation on its node (R-VFIO).
            _agent(
                "metax-vfio-manager",
                "metax-vfio-manager",
                (host.DEV, False),
                (host.SYS, False),
                (host.KERNEL_MODULES, True),
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE, namespace=access.config_map(meta.VFIO_CONFIG_MAP)),
                memory=(48, 128),
            ),
        ),
        AGENT_PROBE,
        env=(env.VFIO_CONFIG,),
        undoes=True,
    ),
    ComponentInfo(
        C.TOPO,
        "topo",
        "topo",
        (C.GPU_LABEL,),
        (
            # The cluster view of topology: reads every node's annotations, fills its one ConfigMap's data (the
            # operator creates the ConfigMap, so no create here).
            _deployment(
                "metax-topo-master",
                Access(
                    cluster=(access.NODE_WATCH,),
                    namespace=(Rule("", ("configmaps",), ("get", "patch"), (meta.TOPOLOGY_VIEW_MAP,)),),
                    events=access.EVENTS,
                ),
            ),
            # Topology annotations on its node.
            _agent(
                "metax-topo-worker",
                "metax-topo-worker",
                (host.SYS, True),
                (host.DEV, True),
                (host.POD_RESOURCES_DIR, True),
                _TOOLS,
                _RUN,
                _LOG,
                rules=access.node_agent(_NODE),
            ),
        ),
        AGENT_PROBE,
        env=(),
        undoes=False,
    ),
    ComponentInfo(
        C.GPU_SCHEDULER,
        "gpu-scheduler",
        "gpu_scheduler",
        (C.GPU_LABEL, C.TOPO),
        (
            # Placement help: reads nodes and pods, writes nothing but Events.
            _deployment(
                "metax-gpu-scheduler",
                Access(cluster=(access.NODE_WATCH, Rule("", ("pods",), access.READ)), events=access.EVENTS),
            ),
        ),
        env=(),
        undoes=False,
    ),
    # R-DRA: the device plugin's alternative on the nodes the allocation setting gives it (metax_core.node.allocation),
    # so it waits for what gpu-device waits for. No hostPID: it reads the kubelet's PodResources over its socket.
    ComponentInfo(
        C.DRA_DRIVER,
        "dra-driver",
        "dra_driver",
        (C.GPU_LABEL, C.RUNTIME, C.MACA),
        (
            # gpu-device's host facts, plus the kubelet's plugin registration and DRA plugin socket directories.
            _agent(
                "metax-dra-driver",
                "metax-dra-driver",
                (host.DEV, False),
                (host.SYS, True),
                (host.PLUGINS_REGISTRY_DIR, False),
                (host.PLUGINS_DIR, False),
                (host.POD_RESOURCES_DIR, True),
                (host.CDI_DIR, False),
                _TOOLS,
                _RUN,
                _LOG,
                rules=Access(cluster=DRA_DRIVER_RULES, events=access.EVENTS),
            ),
        ),
        AGENT_PROBE,
        # The same health checks as gpu-device: the devices it publishes are gpu-device's (a claim's sGPU sharing
        # comes with the claim's configuration, metax_core.dra.claims).
        env=(env.HEALTHY_INTERVAL,),
        undoes=False,
    ),
)
BY_COMPONENT: Mapping[Component, ComponentInfo] = {info.component: info for info in CATALOGUE}
WORKLOADS: Mapping[str, Workload] = {w.name: w for info in CATALOGUE for w in info.workloads}
"""Every component workload by its name."""

DRIVER_DAEMONSET = BY_COMPONENT[Component.DRIVER].workloads[0].name
"""The driver's DaemonSet: the one workload the rollout stamps and drives (R-ROLLOUT, `metax_core.rollout.fleet`)."""

OPERATOR_WORKLOAD = Workload(
    "metax-operator", WorkloadKind.DEPLOYMENT, "metax-operator-controller", False, access=Access(), memory_mib=(64, 256)
)
"""C1, deployed by the chart itself (not rendered by the operator); its rules are `metax_core.cluster.rbac`'s."""

UNDOING_AGENTS: tuple[str, ...] = tuple(info.signal for info in CATALOGUE if info.undoes)
"""The node agents that undo something on their node and answer the uninstall request (their readiness names)."""
