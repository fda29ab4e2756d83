"""``metax-operator doctor``: why has this node no GPU? The readiness chain of one node, first broken link first.

Why it exists (R-DOCTOR, R-READY, R-DEP): "the node shows 0 allocatable GPUs" is every GPU operator's most
common support thread, answered by digging through pods, labels, Events and logs by hand. A node advertises
``metax-tech.com/gpu`` only when every component it depends on works there, so the answer is a chain walked
in dependency order: cluster-operator valid → the Node Ready → for each enabled component of the component
table (`metax_core.components`, in deploy order): deployed (not blocked by a prerequisite), its pod on
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

from collections.abc import Iterator, Mapping, Sequence

from metax_core import components
from metax_core.cluster.doctor import checks, facts, links
from metax_core.cluster.doctor.links import ALLOCATOR, CLUSTER_OPERATOR, NODE, OPERATOR, Diagnosis, Link
from metax_core.components import Component, WorkloadKind
from metax_core.node import allocation
from metax_core.node import labels as node_labels
from metax_core.spec import model as spec

CR_RESOURCE = f"{spec.PLURAL}.{spec.API_GROUP}"


def diagnose(
    node: facts.NodeFacts,
    cluster: facts.ClusterFacts,
    pods: Sequence[facts.PodFacts],
    events: Sequence[facts.EventFacts],
    *,
    table: Mapping[Component, components.ComponentInfo] = components.BY_COMPONENT,
) -> Diagnosis:
    """The node's chain, every link evaluated, in dependency order (R-DEP). ``table`` is the component table
    (a test gives components probes their agents do not declare yet)."""
    found = _links(node, cluster, pods, facts.sorted_events(events), table)
    return Diagnosis(node.name, tuple(found))


def _links(
    node: facts.NodeFacts,
    cluster: facts.ClusterFacts,
    pods: Sequence[facts.PodFacts],
    events: Sequence[facts.EventFacts],
    table: Mapping[Component, components.ComponentInfo],
) -> Iterator[Link]:
    cr = cluster.cr
    look_cr = f"kubectl get {CR_RESOURCE} {spec.OBJECT_NAME} -o yaml"
    if cr.spec is None:
        yield links.broken(CLUSTER_OPERATOR, f"{spec.OBJECT_NAME} valid", cr.problem or "no spec", look_cr)
        return
    yield links.ok(CLUSTER_OPERATOR, f"{spec.OBJECT_NAME} valid", "the spec passes the webhook's validation")
    operator = components.OPERATOR_WORKLOAD.name
    seen = f"generation {cr.generation}, the operator has observed {cr.observed_generation}"
    if cr.observed_generation < cr.generation:
        look = f"kubectl -n {cluster.namespace} logs deployment/{operator}"
        yield links.broken(OPERATOR, "the operator reconciled the spec", f"{seen}: is it running?", look)
    else:
        yield links.ok(OPERATOR, "the operator reconciled the spec", seen)
    if node.kubelet_ready:
        yield links.ok(NODE, "node Ready", "the kubelet posts Ready")
    else:
        yield links.broken(
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
        yield links.ok(ALLOCATOR, "one allocator serves the node", said)
    for component in chain_order(plan):
        info = table[component]
        daemonsets = [w for w in info.workloads if w.kind is WorkloadKind.DAEMON_SET]
        if (component not in plan.deploy and component not in blocked) or not daemonsets or component is unused:
            continue  # disabled, not a node component (its Deployment is in the cluster summary), or not its allocator
        if not has_gpu and not any(w.everywhere for w in daemonsets):
            continue  # node agents run on GPU nodes only: the gpu-found link says why this one is not
        if component in blocked:
            yield links.broken(
                f"{info.signal}-deployed",
                f"{info.signal} deployed",
                blocked[component].reason,
                look_cr,
                component.value,
            )
            continue
        for workload in daemonsets:
            if workload.everywhere or has_gpu:
                yield from checks.pod_links(info, workload, node, pods, cluster, events)
            if workload.everywhere:  # gpu-discovery, then what it found (gpu-label runs only where it found GPUs)
                yield checks.gpu_found(node, cluster.namespace, pods)
        if component is Component.DRIVER:
            yield from checks.driver_links(node, cluster, s, pods, events)
        elif component is Component.VFIO_MANAGER:
            yield checks.vfio_link(node, cluster, pods, events)
        if (
            component is last_gpu_link(plan)
            and Component.GPU_DEVICE in plan.deploy
            and unused is not Component.GPU_DEVICE
        ):
            # a DRA node has no allocatable GPUs: its ResourceSlice has them
            yield checks.allocatable(node, cluster, pods)
    if has_gpu and (health := checks.health(node)) is not None:
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
