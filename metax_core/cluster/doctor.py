"""``metax-operator doctor``: why has this node no GPU? The readiness chain of one node, first broken link first.

Why it exists (R-DOCTOR, R-READY, R-DEP): "the node shows 0 allocatable GPUs" is every GPU operator's most
common support thread, answered by digging through pods, labels, Events and logs by hand. A node advertises
``metax-tech.com/gpu`` only when every component it depends on works there, so the answer is a chain walked
in dependency order: cluster-operator valid → the Node Ready → for each enabled component of the component
table (`metax_core.cluster.components`, in deploy order): deployed (not blocked by a prerequisite), its pod on
the node Running, its readiness signal → what that component produces (GPU found, driver loaded with the
wanted version, VFs, the vfio selection) → allocatable. The first link that does not hold is the answer, with
its evidence (label values, the pod's state, the agent's last Event) and the next command to look closer.

The readiness signal as the cluster sees it is the pod's Ready condition: every agent keeps its readinessProbe
file exactly while its signal says ready (`services._agent.probe`, declared once per component as
``ComponentInfo.probe``). A component that declares no probe (its agent is not built yet:
data-exporter, topology) publishes no signal anyone can see, and that is a broken link: gpu-device
waits for its signal too. New components appear here by being added to the table, nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence

import attrs

from metax_core.cluster import components, doctor_facts
from metax_core.cluster.components import Component, WorkloadKind
from metax_core.cluster.doctor_facts import ClusterFacts, EventFacts, NodeFacts, PodFacts, Taint
from metax_core.errors import InvalidSpec
from metax_core.health import report
from metax_core.node import allocation, devices, driver_config, driver_plan, vfio
from metax_core.node import labels as node_labels
from metax_core.spec import model as spec
from metax_core.wire import event_reasons


class LinkState(enum.Enum):
    HOLDS = "holds"
    BROKEN = "broken"


@attrs.frozen
class Link:
    id: str
    """Stable, for scripts (``-o json``): ``cluster-operator``, ``operator``, ``node``, ``<component>-deployed``,
    ``<component>-pod``, ``<component>-ready``, ``gpu-found``, ``driver-loaded``, ``vfs``, ``vfio-selection``,
    ``allocatable``, ``gpu-health``; ``<component>`` is the component's signal name (``gpu-label``, ``driver``, …)."""
    title: str
    state: LinkState
    evidence: str
    next: str = ""
    """The command that looks closer (for a broken link)."""
    component: str = ""
    """The chart key of the component the link belongs to (empty for the cluster's and the node's links)."""

    @property
    def holds(self) -> bool:
        return self.state is LinkState.HOLDS


@attrs.frozen
class Diagnosis:
    node: str
    links: tuple[Link, ...]

    @property
    def first_broken(self) -> Link | None:
        return next((link for link in self.links if not link.holds), None)

    @property
    def healthy(self) -> bool:
        return self.first_broken is None

    @property
    def has_gpu(self) -> bool:
        return not any(link.id == GPU_FOUND and not link.holds for link in self.links)


CLUSTER_OPERATOR, OPERATOR, NODE, GPU_FOUND = "cluster-operator", "operator", "node", "gpu-found"
DRIVER_LOADED, VFS, VFIO_SELECTION, ALLOCATABLE = "driver-loaded", "vfs", "vfio-selection", "allocatable"
ALLOCATOR = "allocator"
GPU_HEALTH = "gpu-health"
CR_RESOURCE = f"{spec.PLURAL}.{spec.API_GROUP}"
DAEMONSET_TOLERATED = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    }
)
"""Taints the DaemonSet controller tolerates on every DaemonSet pod by itself."""


def _ok(link_id: str, title: str, evidence: str, component: str = "") -> Link:
    return Link(link_id, title, LinkState.HOLDS, evidence, component=component)


def _broken(link_id: str, title: str, evidence: str, next_command: str, component: str = "") -> Link:
    return Link(link_id, title, LinkState.BROKEN, evidence, next_command, component)


def tolerated(tolerations: Sequence[Mapping[str, object]], taint: Taint) -> bool:
    """Kubernetes' rule: a toleration with the taint's key (or none, with Exists), value and effect (or none)."""
    if taint.effect not in ("NoSchedule", "NoExecute") or taint.key in DAEMONSET_TOLERATED:
        return True
    for t in tolerations:
        key, operator, effect = t.get("key") or "", t.get("operator") or "Equal", t.get("effect") or ""
        if (key and key != taint.key) or (effect and effect != taint.effect):
            continue
        if operator == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False


def why_no_pod(node: NodeFacts, daemonset: doctor_facts.DaemonSetFacts | None, name: str) -> str:
    """Why the DaemonSet ``name`` has no pod on ``node``, as far as the objects tell."""
    if daemonset is None:
        return f"DaemonSet {name} does not exist (has the operator applied it? see cluster-operator's conditions)"
    missing = [f"{k}={v}" for k, v in daemonset.node_selector.items() if node.labels.get(k) != v]
    if missing:
        return f"the node lacks the label(s) {', '.join(missing)} that DaemonSet {name} selects"
    untolerated = [t for t in node.taints if not tolerated(daemonset.tolerations, t)]
    if untolerated:
        said = ", ".join(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in untolerated)
        return f"DaemonSet {name} does not tolerate the node's taint(s) {said}"
    return f"DaemonSet {name} has no pod on the node yet (the DaemonSet controller creates it)"


def _last_event(events: Sequence[EventFacts], action: str, *, warning_only: bool = False) -> EventFacts | None:
    mine = [e for e in events if e.action == action and (e.warning or not warning_only)]
    return mine[-1] if mine else None


def _event_text(event: EventFacts | None) -> str:
    return "" if event is None else f"; last Event {event.reason}: {event.message}"


def _pod_links(
    info: components.ComponentInfo,
    workload: components.Workload,
    node: NodeFacts,
    pods: Sequence[PodFacts],
    facts: ClusterFacts,
    events: Sequence[EventFacts],
) -> Iterator[Link]:
    key, ns = info.component.value, facts.namespace
    title = info.signal if workload.publishes_readiness else workload.name.removeprefix("metax-")  # gpu-discovery
    mine = [p for p in pods if p.component == key and p.node == node.name and p.name.startswith(workload.name)]
    live = [p for p in mine if not p.deleting]
    last_warning = _last_event(events, info.signal, warning_only=True)
    pod_title = f"{workload.name} pod running on the node"
    if not live:
        gone = f" ({len(mine)} pod(s) being deleted)" if mine else ""
        why = why_no_pod(node, facts.daemonsets.get(workload.name), workload.name)
        yield _broken(
            f"{title}-pod",
            pod_title,
            f"no pod{gone}: {why}",
            f"kubectl -n {ns} describe daemonset/{workload.name}",
            key,
        )
        return
    pod = live[0]
    if pod.phase != "Running":
        waiting = f", {pod.waiting_reason}: {pod.waiting_message}".rstrip(": ") if pod.waiting_reason else ""
        yield _broken(
            f"{title}-pod",
            pod_title,
            f"pod {pod.name} is {pod.phase}{waiting}",
            f"kubectl -n {ns} describe pod/{pod.name}",
            key,
        )
        return
    restarted = f", {pod.restarts} restart(s)" if pod.restarts else ""
    yield _ok(f"{title}-pod", pod_title, f"pod {pod.name} Running{restarted}", key)
    signal_title = f"{title} readiness signal"
    if info.probe is None:
        yield _broken(
            f"{title}-ready",
            signal_title,
            f"{title} publishes no readiness signal: its pods declare no readinessProbe (no agent does its work "
            "yet), so nothing on the node says it works and gpu-device does not advertise",
            f"kubectl -n {ns} logs pod/{pod.name}",
            key,
        )
    elif not pod.ready:
        detail = pod.waiting_reason or pod.ready_message or "Ready is False"
        yield _broken(
            f"{title}-ready",
            signal_title,
            f"pod {pod.name} is not Ready ({detail}): the agent says {title} does not work on the node"
            f"{_event_text(last_warning)}",
            f"kubectl -n {ns} logs pod/{pod.name}",
            key,
        )
    else:
        yield _ok(f"{title}-ready", signal_title, f"pod {pod.name} Ready (its readiness probe passes)", key)


def _gpu_found(node: NodeFacts, ns: str, pods: Sequence[PodFacts]) -> Link:
    label = node_labels.GPU_INSTALLED
    if node.labels.get(label) == node_labels.TRUE:
        product = node.labels.get(node_labels.GPU_PRODUCT, "unknown product")
        count = node.labels.get(node_labels.GPU_COUNT, "?")
        return _ok(GPU_FOUND, "MetaX GPU found", f"{label}=true: {count} x {product}", Component.GPU_LABEL.value)
    discovery = components.GPU_DISCOVERY.name
    pod = next((p.name for p in pods if p.name.startswith(discovery) and p.node == node.name), None)
    look = f"kubectl -n {ns} logs pod/{pod}" if pod else f"kubectl describe node {node.name}"
    return _broken(
        GPU_FOUND,
        "MetaX GPU found",
        f"no label {label}=true: gpu-discovery found no MetaX GPU (PCI vendor 0x9999) on this node",
        look,
        Component.GPU_LABEL.value,
    )


def _look_at_pod(ns: str, node: str, pods: Sequence[PodFacts], component: Component) -> str:
    pod = next((p.name for p in pods if p.component == component.value and p.node == node and not p.deleting), None)
    return (
        f"kubectl -n {ns} logs pod/{pod}"
        if pod
        else f"kubectl get events -n default --field-selector involvedObject.name={node}"
    )


def _driver_links(
    node: NodeFacts,
    facts: ClusterFacts,
    s: spec.ClusterOperatorSpec,
    pods: Sequence[PodFacts],
    events: Sequence[EventFacts],
) -> Iterator[Link]:
    key, signal = Component.DRIVER.value, components.signal(Component.DRIVER)
    look = _look_at_pod(facts.namespace, node.name, pods, Component.DRIVER)
    last = _last_event(events, signal)
    ready, version = node.labels.get(node_labels.DRIVER_READY), node.labels.get(node_labels.DRIVER_VERSION)
    wanted = s.driver.payload.version if s.driver.deploy_policy is spec.DeployPolicy.PREFER_CLOUD else None
    title = "kernel driver loaded" + (f" ({wanted})" if wanted else "")
    if ready != node_labels.TRUE:
        yield _broken(
            DRIVER_LOADED,
            title,
            f"no label {node_labels.DRIVER_READY}=true{_event_text(last)}",
            look,
            key,
        )
    elif wanted and not driver_plan.same_version(version, wanted) and not facts.rollout_active:
        yield _broken(DRIVER_LOADED, title, f"{node_labels.DRIVER_VERSION}={version}, wanted {wanted}", look, key)
    else:
        during = " (a driver rollout is running)" if wanted and not driver_plan.same_version(version, wanted) else ""
        yield _ok(
            DRIVER_LOADED,
            title,
            f"{node_labels.DRIVER_READY}=true, {node_labels.DRIVER_VERSION}={version}{during}",
            key,
        )
    if facts.driver_config is None:
        if facts.driver_config_problem:
            yield _broken(
                VFS,
                "VF count as driver-config says",
                f"driver-config is unreadable: {facts.driver_config_problem}",
                f"kubectl -n {facts.namespace} get configmap {driver_config.CONFIGMAP_NAME} -o yaml",
                key,
            )
        return
    wanted_vfs = driver_config.for_node(facts.driver_config, node.name).vfnum
    have = node.labels.get(node_labels.GPU_VFNUM)
    vf_title = f"{wanted_vfs} VF(s) per GPU (driver-config)"
    if have is None and wanted_vfs == 0:
        yield _ok(VFS, vf_title, f"no {node_labels.GPU_VFNUM} label (no PF on the node, or no SR-IOV)", key)
    elif have != str(wanted_vfs):
        refused = _last_event([e for e in events if e.reason == event_reasons.VF_COUNT_REFUSED], signal)
        yield _broken(VFS, vf_title, f"{node_labels.GPU_VFNUM}={have}{_event_text(refused or last)}", look, key)
    else:
        yield _ok(VFS, vf_title, f"{node_labels.GPU_VFNUM}={have}", key)


def _vfio_link(node: NodeFacts, facts: ClusterFacts, pods: Sequence[PodFacts], events: Sequence[EventFacts]) -> Link:
    key, signal = Component.VFIO_MANAGER.value, components.signal(Component.VFIO_MANAGER)
    try:
        results = vfio.parse_annotation(node.annotations.get(vfio.ANNOTATION))
    except InvalidSpec as exc:
        look = f"kubectl describe node {node.name}"
        return _broken(VFIO_SELECTION, "vfio-pci selection applied", str(exc.errors[0]), look, key)
    failed = sorted(i for i, bound in results.items() if not bound)
    if failed:
        last = _last_event(events, signal, warning_only=True)
        return _broken(
            VFIO_SELECTION,
            "vfio-pci selection applied",
            f"{vfio.ANNOTATION}: GPU(s) {', '.join(map(str, failed))} not bound to vfio-pci{_event_text(last)}",
            _look_at_pod(facts.namespace, node.name, pods, Component.VFIO_MANAGER),
            key,
        )
    bound = sum(results.values())
    return _ok(VFIO_SELECTION, "vfio-pci selection applied", f"{bound} GPU(s) bound to vfio-pci", key)


def _allocatable(node: NodeFacts, facts: ClusterFacts, pods: Sequence[PodFacts]) -> Link:
    mode = devices.settings_from_labels(node.labels).mode
    resource = devices.Resource.SGPU if mode is devices.Mode.SGPU else devices.Resource.GPU
    try:
        vfio_bound = sum(vfio.parse_annotation(node.annotations.get(vfio.ANNOTATION)).values())
    except InvalidSpec:
        vfio_bound = 0  # the vfio-selection link says what is wrong with it
    have = _quantity(node.allocatable.get(resource.value))
    have_vfio = _quantity(node.allocatable.get(devices.Resource.VFIO_GPU.value))
    gpus = _quantity(node.labels.get(node_labels.GPU_COUNT))
    key = Component.GPU_DEVICE.value
    said = f"allocatable {resource.value}={have}" + (
        f", {devices.Resource.VFIO_GPU.value}={have_vfio}" if vfio_bound else ""
    )
    look = _look_at_pod(facts.namespace, node.name, pods, Component.GPU_DEVICE)
    if vfio_bound and have_vfio < vfio_bound:
        return _broken(
            ALLOCATABLE, "GPUs allocatable", f"{said}, but {vfio_bound} GPU(s) are bound to vfio-pci", look, key
        )
    if have == 0 and not (vfio_bound and vfio_bound >= gpus):
        return _broken(
            ALLOCATABLE, "GPUs allocatable", f"{said} (mode {mode.value}): nothing the kubelet can give pods", look, key
        )
    return _ok(ALLOCATABLE, "GPUs allocatable", said, key)


def _health(node: NodeFacts) -> Link | None:
    """Every GPU's verdict as the node's allocator agent reports it (R-HEALTH); None before it reported."""
    text = node.annotations.get(report.ANNOTATION)
    if text is None:
        return None
    look = f"kubectl describe node {node.name}"
    try:
        found = report.decode(text)
    except InvalidSpec as exc:
        return _broken(GPU_HEALTH, "GPUs healthy", f"the agent's health report does not read: {exc}", look)
    said = report.condition(found)
    component = found.agent and next((c.value for c in Component if c.value == _chart_key(found.agent)), "")
    if found.gpus:
        events = f"kubectl get events -A --field-selector involvedObject.name={node.name},reason={said.reason}"
        return _broken(GPU_HEALTH, "GPUs healthy", f"{said.reason}: {said.message}", events, component or "")
    return _ok(GPU_HEALTH, "GPUs healthy", said.message, component or "")


def _chart_key(agent: str) -> str:
    """``gpu-device`` → ``gpuDevice``: the component key of the agent that wrote the report."""
    head, *rest = agent.split("-")
    return head + "".join(part.capitalize() for part in rest)


def _quantity(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def diagnose(
    node: NodeFacts,
    facts: ClusterFacts,
    pods: Sequence[PodFacts],
    events: Sequence[EventFacts],
    *,
    table: Mapping[Component, components.ComponentInfo] = components.BY_COMPONENT,
) -> Diagnosis:
    """The node's chain, every link evaluated, in dependency order (R-DEP). ``table`` is the component table
    (a test gives components probes their agents do not declare yet)."""
    links = list(_links(node, facts, pods, doctor_facts.sorted_events(events), table))
    return Diagnosis(node.name, tuple(links))


def _links(
    node: NodeFacts,
    facts: ClusterFacts,
    pods: Sequence[PodFacts],
    events: Sequence[EventFacts],
    table: Mapping[Component, components.ComponentInfo],
) -> Iterator[Link]:
    cr = facts.cr
    look_cr = f"kubectl get {CR_RESOURCE} {spec.OBJECT_NAME} -o yaml"
    if cr.spec is None:
        yield _broken(CLUSTER_OPERATOR, f"{spec.OBJECT_NAME} valid", cr.problem or "no spec", look_cr)
        return
    yield _ok(CLUSTER_OPERATOR, f"{spec.OBJECT_NAME} valid", "the spec passes the webhook's validation")
    operator = components.OPERATOR_WORKLOAD.name
    seen = f"generation {cr.generation}, the operator has observed {cr.observed_generation}"
    if cr.observed_generation < cr.generation:
        look = f"kubectl -n {facts.namespace} logs deployment/{operator}"
        yield _broken(OPERATOR, "the operator reconciled the spec", f"{seen}: is it running?", look)
    else:
        yield _ok(OPERATOR, "the operator reconciled the spec", seen)
    if node.kubelet_ready:
        yield _ok(NODE, "node Ready", "the kubelet posts Ready")
    else:
        yield _broken(
            NODE, "node Ready", f"the node is not Ready: {node.kubelet_message}", f"kubectl describe node {node.name}"
        )
    s = cr.spec
    plan = components.plan(components.enabled(s))
    blocked = {b.component: b for b in plan.blocked}
    has_gpu = node.labels.get(node_labels.GPU_INSTALLED) == node_labels.TRUE
    unused = None
    if Component.DRA_DRIVER in plan.deploy and has_gpu:  # R-DRA: one of gpu-device and dra-driver serves it
        decision = allocation.decide(s.dra_driver.default_allocation, node.labels)
        dra = decision.allocator is allocation.Allocator.DRA
        unused = Component.GPU_DEVICE if dra else Component.DRA_DRIVER
        said = (
            decision.problem
            or f"{decision.allocator.value} ({allocation.LABEL}, default {s.dra_driver.default_allocation.value})"
        )
        yield _ok(ALLOCATOR, "one allocator serves the node", said)
    for component in chain_order(plan):
        info = table[component]
        daemonsets = [w for w in info.workloads if w.kind is WorkloadKind.DAEMON_SET]
        if (component not in plan.deploy and component not in blocked) or not daemonsets or component is unused:
            continue  # disabled, not a node component (its Deployment is in the cluster summary), or not its allocator
        if not has_gpu and not any(w.everywhere for w in daemonsets):
            continue  # node agents run on GPU nodes only: the gpu-found link says why this one is not
        if component in blocked:
            yield _broken(
                f"{info.signal}-deployed",
                f"{info.signal} deployed",
                blocked[component].reason,
                look_cr,
                component.value,
            )
            continue
        for workload in daemonsets:
            if workload.everywhere or has_gpu:
                yield from _pod_links(info, workload, node, pods, facts, events)
            if workload.everywhere:  # gpu-discovery, then what it found (gpu-label runs only where it found GPUs)
                yield _gpu_found(node, facts.namespace, pods)
        if component is Component.DRIVER:
            yield from _driver_links(node, facts, s, pods, events)
        elif component is Component.VFIO_MANAGER:
            yield _vfio_link(node, facts, pods, events)
        if (
            component is last_gpu_link(plan)
            and Component.GPU_DEVICE in plan.deploy
            and unused is not Component.GPU_DEVICE
        ):
            yield _allocatable(node, facts, pods)  # a DRA node has no allocatable GPUs: its ResourceSlice has them
    if has_gpu and (health := _health(node)) is not None:
        yield health


def chain_order(plan: components.DeployPlan) -> list[Component]:
    """Deploy order (R-DEP), with what gpu-device waits for (R-READY), vfio-manager and dra-driver first, since
    allocatable GPUs (or a DRA node's driver) end that part; the components GPUs do not wait for (data-exporter,
    topology) come after it."""
    deployed = (*plan.deploy, *(b.component for b in plan.blocked))
    gating = {
        *components.requirements(Component.GPU_DEVICE, deployed),
        Component.GPU_DEVICE,
        Component.VFIO_MANAGER,
        Component.DRA_DRIVER,
    }
    order = components.deploy_order(Component)
    return [c for c in order if c in gating] + [c for c in order if c not in gating]


def last_gpu_link(plan: components.DeployPlan) -> Component:
    """The component after whose links the chain checks allocatable GPUs."""
    return Component.VFIO_MANAGER if Component.VFIO_MANAGER in plan.deploy else Component.GPU_DEVICE
