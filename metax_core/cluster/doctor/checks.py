"""What each link of the chain looks at on one node: the agent pods, the labels they publish, the Events they emit.

Why a module of its own: `chain` walks the components in dependency order and says which links a node has;
these checks read the facts (`facts`) for one link each and say whether it holds, with the evidence and the
next command. Every name they read comes from its one owner (node labels, the vfio annotation, Event reasons).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from metax_core import components
from metax_core.cluster.doctor.facts import ClusterFacts, DaemonSetFacts, EventFacts, NodeFacts, PodFacts, Taint
from metax_core.cluster.doctor.links import (
    ALLOCATABLE,
    DRIVER_LOADED,
    GPU_FOUND,
    GPU_HEALTH,
    VFIO_SELECTION,
    VFS,
    Link,
    broken,
    ok,
)
from metax_core.components import Component
from metax_core.errors import InvalidSpec
from metax_core.health import report
from metax_core.node import devices, driver_config, driver_plan, vfio
from metax_core.node import labels as node_labels
from metax_core.spec import model as spec
from metax_core.wire import event_reasons

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


def why_no_pod(node: NodeFacts, daemonset: DaemonSetFacts | None, name: str) -> str:
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


def pod_links(
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
        yield broken(
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
        yield broken(
            f"{title}-pod",
            pod_title,
            f"pod {pod.name} is {pod.phase}{waiting}",
            f"kubectl -n {ns} describe pod/{pod.name}",
            key,
        )
        return
    restarted = f", {pod.restarts} restart(s)" if pod.restarts else ""
    yield ok(f"{title}-pod", pod_title, f"pod {pod.name} Running{restarted}", key)
    signal_title = f"{title} readiness signal"
    if info.probe is None:
        yield broken(
            f"{title}-ready",
            signal_title,
            f"{title} publishes no readiness signal: its pods declare no readinessProbe (no agent does its work "
            "yet), so nothing on the node says it works and gpu-device does not advertise",
            f"kubectl -n {ns} logs pod/{pod.name}",
            key,
        )
    elif not pod.ready:
        detail = pod.waiting_reason or pod.ready_message or "Ready is False"
        yield broken(
            f"{title}-ready",
            signal_title,
            f"pod {pod.name} is not Ready ({detail}): the agent says {title} does not work on the node"
            f"{_event_text(last_warning)}",
            f"kubectl -n {ns} logs pod/{pod.name}",
            key,
        )
    else:
        yield ok(f"{title}-ready", signal_title, f"pod {pod.name} Ready (its readiness probe passes)", key)


def gpu_found(node: NodeFacts, ns: str, pods: Sequence[PodFacts]) -> Link:
    label = node_labels.GPU_INSTALLED
    if node.labels.get(label) == node_labels.TRUE:
        product = node.labels.get(node_labels.GPU_PRODUCT, "unknown product")
        count = node.labels.get(node_labels.GPU_COUNT, "?")
        return ok(GPU_FOUND, "MetaX GPU found", f"{label}=true: {count} x {product}", Component.GPU_LABEL.value)
    discovery = components.GPU_DISCOVERY.name
    pod = next((p.name for p in pods if p.name.startswith(discovery) and p.node == node.name), None)
    look = f"kubectl -n {ns} logs pod/{pod}" if pod else f"kubectl describe node {node.name}"
    return broken(
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


def driver_links(
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
        yield broken(
            DRIVER_LOADED,
            title,
            f"no label {node_labels.DRIVER_READY}=true{_event_text(last)}",
            look,
            key,
        )
    elif wanted and not driver_plan.same_version(version, wanted) and not facts.rollout_active:
        yield broken(DRIVER_LOADED, title, f"{node_labels.DRIVER_VERSION}={version}, wanted {wanted}", look, key)
    else:
        during = " (a driver rollout is running)" if wanted and not driver_plan.same_version(version, wanted) else ""
        yield ok(
            DRIVER_LOADED,
            title,
            f"{node_labels.DRIVER_READY}=true, {node_labels.DRIVER_VERSION}={version}{during}",
            key,
        )
    if facts.driver_config is None:
        if facts.driver_config_problem:
            yield broken(
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
        yield ok(VFS, vf_title, f"no {node_labels.GPU_VFNUM} label (no PF on the node, or no SR-IOV)", key)
    elif have != str(wanted_vfs):
        refused = _last_event([e for e in events if e.reason == event_reasons.VF_COUNT_REFUSED], signal)
        yield broken(VFS, vf_title, f"{node_labels.GPU_VFNUM}={have}{_event_text(refused or last)}", look, key)
    else:
        yield ok(VFS, vf_title, f"{node_labels.GPU_VFNUM}={have}", key)


def vfio_link(node: NodeFacts, facts: ClusterFacts, pods: Sequence[PodFacts], events: Sequence[EventFacts]) -> Link:
    key, signal = Component.VFIO_MANAGER.value, components.signal(Component.VFIO_MANAGER)
    try:
        results = vfio.parse_annotation(node.annotations.get(vfio.ANNOTATION))
    except InvalidSpec as exc:
        look = f"kubectl describe node {node.name}"
        return broken(VFIO_SELECTION, "vfio-pci selection applied", str(exc.errors[0]), look, key)
    failed = sorted(i for i, bound in results.items() if not bound)
    if failed:
        last = _last_event(events, signal, warning_only=True)
        return broken(
            VFIO_SELECTION,
            "vfio-pci selection applied",
            f"{vfio.ANNOTATION}: GPU(s) {', '.join(map(str, failed))} not bound to vfio-pci{_event_text(last)}",
            _look_at_pod(facts.namespace, node.name, pods, Component.VFIO_MANAGER),
            key,
        )
    bound = sum(results.values())
    return ok(VFIO_SELECTION, "vfio-pci selection applied", f"{bound} GPU(s) bound to vfio-pci", key)


def allocatable(node: NodeFacts, facts: ClusterFacts, pods: Sequence[PodFacts]) -> Link:
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
        return broken(
            ALLOCATABLE, "GPUs allocatable", f"{said}, but {vfio_bound} GPU(s) are bound to vfio-pci", look, key
        )
    if have == 0 and not (vfio_bound and vfio_bound >= gpus):
        return broken(
            ALLOCATABLE, "GPUs allocatable", f"{said} (mode {mode.value}): nothing the kubelet can give pods", look, key
        )
    return ok(ALLOCATABLE, "GPUs allocatable", said, key)


def health(node: NodeFacts) -> Link | None:
    """Every GPU's verdict as the node's allocator agent reports it (R-HEALTH); None before it reported."""
    text = node.annotations.get(report.ANNOTATION)
    if text is None:
        return None
    look = f"kubectl describe node {node.name}"
    try:
        found = report.decode(text)
    except InvalidSpec as exc:
        return broken(GPU_HEALTH, "GPUs healthy", f"the agent's health report does not read: {exc}", look)
    said = report.condition(found)
    component = found.agent and next((c.value for c in Component if c.value == _chart_key(found.agent)), "")
    if found.gpus:
        events = f"kubectl get events -A --field-selector involvedObject.name={node.name},reason={said.reason}"
        return broken(GPU_HEALTH, "GPUs healthy", f"{said.reason}: {said.message}", events, component or "")
    return ok(GPU_HEALTH, "GPUs healthy", said.message, component or "")


def _chart_key(agent: str) -> str:
    """``gpu-device`` → ``gpuDevice``: the component key of the agent that wrote the report."""
    head, *rest = agent.split("-")
    return head + "".join(part.capitalize() for part in rest)


def _quantity(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
