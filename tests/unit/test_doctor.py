"""The readiness chain of ``metax-operator doctor`` (R-DOCTOR, R-READY, R-DEP, R-VF, R-VFIO).

Aspects:
- a healthy node (every enabled component with a readiness probe, as the runtime and maca agents will
  declare) passes, every link holds, exit code 0;
- each link broken in turn, on that healthy node, is the first broken link named, with its evidence and the
  next command (cluster-operator missing / refused, node not Ready, a component pod missing — why: selector,
  taint, no DaemonSet —, a pod not running, a readiness signal down with the agent's last Event, no GPU, the
  driver not loaded or on the wrong version, the VF count, a failed vfio binding, nothing allocatable);
- with today's table, components without an agent (no readinessProbe) are broken links: container-runtime
  is named first on an otherwise healthy node;
- a disabled prerequisite names the blocked component (R-DEP);
- chain order follows the component table (a component gpu-device waits for comes before allocatable;
  data-exporter after it);
- the summary's states and exit codes; the JSON document's shape;
- the raw-object readers (pods' waiting reasons, Events' time and agent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from metax_core import components
from metax_core.cluster.doctor import chain, checks, facts, links
from metax_core.cluster.doctor import report as doctor_report
from metax_core.components import Component
from metax_core.health import report, verdict
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import PciAddress
from metax_core.node import allocation, devices, driver_config, vfio
from metax_core.node import labels as node_labels
from metax_core.spec import validation
from metax_core.spec.names import REGISTRY_EXAMPLE
from metax_core.wire import event_reasons, meta

NS = "metax-operator"
NODE = "gpu-1"
VERSION = "2.20.0"
TABLE = {
    c: attrs.evolve(info, probe=info.probe or components.AGENT_PROBE) for c, info in components.BY_COMPONENT.items()
}
"""Every component with a probe: the table once the container-runtime and maca agents have landed."""
SPEC_DOC: dict[str, Any] = {
    "registry": REGISTRY_EXAMPLE,
    "driver": {"payload": {"version": VERSION}},
    "vfioManager": {"deploy": True},
    "exporter": {"deploy": False},
    "topo": {"deploy": False},
    "gpuScheduler": {"deploy": False},
}
NODE_COMPONENTS = (
    Component.GPU_LABEL,
    Component.RUNTIME,
    Component.DRIVER,
    Component.MACA,
    Component.GPU_DEVICE,
    Component.VFIO_MANAGER,
)


def spec_with(**changes: Any) -> dict[str, Any]:
    return {**SPEC_DOC, **changes}


def cluster(document: Mapping[str, Any] | None = None, **changes: Any) -> facts.ClusterFacts:
    parsed = validation.parse(document or SPEC_DOC)
    daemonsets = {}
    for c in NODE_COMPONENTS:
        for w in components.BY_COMPONENT[c].workloads:
            selector = {} if w.everywhere else {node_labels.GPU_INSTALLED: node_labels.TRUE}
            daemonsets[w.name] = facts.DaemonSetFacts(w.name, selector)
    base = facts.ClusterFacts(
        facts.CrFacts(parsed, conditions=(("Ready", "True", "AllReady", ""),), generation=2, observed_generation=2),
        NS,
        daemonsets,
        driver_config.DriverConfig(node_vfnums={NODE: 2}),
    )
    return attrs.evolve(base, **changes)


def healthy_node(**changes: Any) -> facts.NodeFacts:
    labels = {
        node_labels.GPU_INSTALLED: node_labels.TRUE,
        node_labels.GPU_PRODUCT: "C500",
        node_labels.GPU_COUNT: "2",
        node_labels.GPU_VFNUM: "2",
        node_labels.DRIVER_READY: node_labels.TRUE,
        node_labels.DRIVER_VERSION: VERSION,
    }
    node = facts.NodeFacts(
        NODE,
        labels=labels,
        annotations={vfio.ANNOTATION: vfio.annotation_value({0: True})},
        allocatable={devices.Resource.GPU.value: "3", devices.Resource.VFIO_GPU.value: "1"},
    )
    return attrs.evolve(node, **changes)


def pod(component: Component, **changes: Any) -> facts.PodFacts:
    """A pod of the component's agent (gpu-label's, not gpu-discovery's)."""
    w = next(w for w in components.BY_COMPONENT[component].workloads if w.publishes_readiness)
    return attrs.evolve(facts.PodFacts(f"{w.name}-x1", component.value, NODE, "Running", True), **changes)


def discovery_pod(**changes: Any) -> facts.PodFacts:
    name = f"{components.GPU_DISCOVERY.name}-x1"
    return attrs.evolve(facts.PodFacts(name, Component.GPU_LABEL.value, NODE, "Running", True), **changes)


def pods(**replaced: facts.PodFacts | None) -> list[facts.PodFacts]:
    found = [discovery_pod()]
    for c in NODE_COMPONENTS:
        if c.value in replaced:
            if (p := replaced[c.value]) is not None:
                found.append(p)
        else:
            found.append(pod(c))
    return found


def diagnose(
    node: facts.NodeFacts | None = None,
    cluster_facts: facts.ClusterFacts | None = None,
    pod_list: list[facts.PodFacts] | None = None,
    events: list[facts.EventFacts] | None = None,
    table: Mapping[Component, components.ComponentInfo] = TABLE,
) -> links.Diagnosis:
    return chain.diagnose(
        node or healthy_node(),
        cluster_facts or cluster(),
        pods() if pod_list is None else pod_list,
        events or [],
        table=table,
    )


def first(d: links.Diagnosis) -> links.Link:
    link = d.first_broken
    assert link is not None, [(x.id, x.evidence) for x in d.links]
    return link


def test_a_healthy_node_passes_every_link() -> None:
    d = diagnose()
    assert d.healthy, [(x.id, x.evidence) for x in d.links if not x.holds]
    assert [x.id for x in d.links] == [
        "cluster-operator",
        "operator",
        "node",
        "gpu-discovery-pod",
        "gpu-discovery-ready",
        "gpu-found",
        "gpu-label-pod",
        "gpu-label-ready",
        "container-runtime-pod",
        "container-runtime-ready",
        "driver-pod",
        "driver-ready",
        "driver-loaded",
        "vfs",
        "maca-pod",
        "maca-ready",
        "gpu-device-pod",
        "gpu-device-ready",
        "vfio-manager-pod",
        "vfio-manager-ready",
        "vfio-selection",
        "allocatable",
    ]
    assert doctor_report.exit_code([d]) == doctor_report.EXIT_HEALTHY


def test_a_component_without_an_agent_is_a_broken_link() -> None:
    no_agent = {**TABLE, Component.RUNTIME: attrs.evolve(TABLE[Component.RUNTIME], probe=None)}
    link = first(diagnose(table=no_agent))
    assert link.id == "container-runtime-ready"
    assert "no readinessProbe" in link.evidence
    assert link.next == f"kubectl -n {NS} logs pod/metax-container-runtime-x1"


def test_with_todays_table_the_first_component_without_an_agent_is_named() -> None:
    waiting = first_without_probe(components.BY_COMPONENT)
    d = diagnose(table=components.BY_COMPONENT)
    if waiting is None:  # every node component has its agent: the healthy node passes with the real table
        assert d.healthy
    else:
        assert (first(d).id, "no readinessProbe" in first(d).evidence) == (f"{waiting}-ready", True)


def first_without_probe(table: Mapping[Component, components.ComponentInfo]) -> str | None:
    """The first component of the chain (for SPEC_DOC) whose DaemonSet declares no probe: its agent is missing."""
    plan = components.plan(components.enabled(validation.parse(SPEC_DOC)))
    return next(
        (table[c].signal for c in chain.chain_order(plan) if c in NODE_COMPONENTS and table[c].probe is None), None
    )


def test_no_cluster_operator() -> None:
    c = cluster(cr=facts.CrFacts(None, "no ClusterOperator cluster-operator: is the chart installed?"))
    d = diagnose(cluster_facts=c)
    assert (first(d).id, first(d).evidence) == ("cluster-operator", c.cr.problem)
    assert first(d).next == "kubectl get clusteroperators.gpu.metax-tech.com cluster-operator -o yaml"
    assert doctor_report.exit_code([d]) == doctor_report.EXIT_BROKEN


def test_an_operator_behind_the_spec() -> None:
    behind = cluster(cr=attrs.evolve(cluster().cr, generation=3, observed_generation=2))
    link = first(diagnose(cluster_facts=behind))
    assert (link.id, link.evidence) == ("operator", "generation 3, the operator has observed 2: is it running?")
    assert link.next == f"kubectl -n {NS} logs deployment/metax-operator"


def test_a_node_the_kubelet_does_not_report_ready() -> None:
    link = first(diagnose(healthy_node(kubelet_ready=False, kubelet_message="Kubelet stopped posting node status")))
    assert link.id == "node" and "stopped posting" in link.evidence
    assert link.next == f"kubectl describe node {NODE}"


def test_a_missing_pod_says_why_selector() -> None:
    node = healthy_node()
    no_selector_match = cluster(
        daemonsets={
            **cluster().daemonsets,
            "metax-gpu-label": facts.DaemonSetFacts("metax-gpu-label", {"pool": "gpu"}),
        }
    )
    link = first(diagnose(node, no_selector_match, pods(gpuLabel=None)))
    assert link.id == "gpu-label-pod"
    assert "lacks the label(s) pool=gpu" in link.evidence
    assert link.next == f"kubectl -n {NS} describe daemonset/metax-gpu-label"


def test_a_missing_pod_says_why_taint_and_tolerations_match_as_kubernetes_does() -> None:
    tainted = healthy_node(
        taints=(
            facts.Taint("dedicated", "ml", "NoSchedule"),
            facts.Taint("soft", "", "PreferNoSchedule"),  # never keeps a pod away
            facts.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),  # DaemonSets tolerate it
        )
    )
    link = first(diagnose(tainted, pod_list=pods(driver=None)))
    assert link.id == "driver-pod" and "does not tolerate the node's taint(s) dedicated=ml:NoSchedule" in link.evidence
    tolerating = {
        **cluster().daemonsets,
        "metax-driver": facts.DaemonSetFacts("metax-driver", tolerations=({"key": "dedicated", "operator": "Exists"},)),
    }
    link = first(diagnose(tainted, cluster(daemonsets=tolerating), pods(driver=None)))
    assert "has no pod on the node yet" in link.evidence
    assert checks.tolerated([{"operator": "Exists"}], facts.Taint("any", "x", "NoExecute"))
    assert not checks.tolerated([{"key": "a", "value": "1"}], facts.Taint("a", "2", "NoSchedule"))
    assert not checks.tolerated([{"key": "a", "effect": "NoExecute"}], facts.Taint("a", "", "NoSchedule"))


def test_a_missing_daemonset() -> None:
    without = {k: v for k, v in cluster().daemonsets.items() if k != "metax-gpu-device"}
    link = first(diagnose(cluster_facts=cluster(daemonsets=without), pod_list=pods(gpuDevice=None)))
    assert link.id == "gpu-device-pod" and "DaemonSet metax-gpu-device does not exist" in link.evidence


def test_a_deleted_pod_being_replaced() -> None:
    link = first(diagnose(pod_list=pods(driver=pod(Component.DRIVER, deleting=True))))
    assert link.id == "driver-pod" and "1 pod(s) being deleted" in link.evidence


def test_a_pod_that_does_not_run() -> None:
    crashing = pod(
        Component.DRIVER, phase="Pending", ready=False, waiting_reason="CrashLoopBackOff", waiting_message="back-off 5m"
    )
    link = first(diagnose(pod_list=pods(driver=crashing)))
    assert link.id == "driver-pod"
    assert link.evidence == "pod metax-driver-x1 is Pending, CrashLoopBackOff: back-off 5m"
    assert link.next == f"kubectl -n {NS} describe pod/metax-driver-x1"


def test_a_readiness_signal_down_shows_the_agents_last_warning() -> None:
    events = [
        facts.EventFacts(event_reasons.DRIVER_READY, "metax 2.18.0", "Normal", "driver", "2026-01-01T00:00:00Z"),
        facts.EventFacts(
            event_reasons.DRIVER_LOAD_FAILED, "Invalid module format", "Warning", "driver", "2026-01-01T00:01:00Z"
        ),
        facts.EventFacts(event_reasons.VFIO_BIND_FAILED, "other agent", "Warning", "vfio-manager", "2026-01-01T00:02Z"),
    ]
    unready = pod(Component.DRIVER, ready=False, ready_message="containers with unready status: [driver]")
    d = diagnose(pod_list=pods(driver=unready), events=list(reversed(events)))
    link = first(d)
    assert link.id == "driver-ready"
    assert "not Ready (containers with unready status: [driver])" in link.evidence
    assert link.evidence.endswith("last Event DriverLoadFailed: Invalid module format")
    assert link.next == f"kubectl -n {NS} logs pod/metax-driver-x1"


def test_no_gpu_on_the_node() -> None:
    cpu = facts.NodeFacts("cpu-1")
    d = diagnose(cpu, pod_list=[discovery_pod(node="cpu-1")])
    link = first(d)
    assert link.id == "gpu-found" and "gpu-discovery found no MetaX GPU" in link.evidence
    assert link.next == f"kubectl -n {NS} logs pod/metax-gpu-discovery-x1"
    assert [x.id for x in d.links] == [  # gpu-label and the other agents run only where gpu-discovery found GPUs
        "cluster-operator",
        "operator",
        "node",
        "gpu-discovery-pod",
        "gpu-discovery-ready",
        "gpu-found",
    ]
    assert doctor_report.state(d) == doctor_report.NO_GPU


def test_driver_not_loaded_and_wrong_version() -> None:
    labels = dict(healthy_node().labels)
    del labels[node_labels.DRIVER_READY]
    event = facts.EventFacts(event_reasons.HOST_DRIVER_IN_USE, "pid 4242 uses the GPU", "Warning", "driver", "t1")
    link = first(diagnose(healthy_node(labels=labels), events=[event]))
    assert link.id == "driver-loaded"
    assert (
        link.evidence == f"no label {node_labels.DRIVER_READY}=true; last Event HostDriverInUse: pid 4242 uses the GPU"
    )
    old = {**healthy_node().labels, node_labels.DRIVER_VERSION: "2.18.0"}
    link = first(diagnose(healthy_node(labels=old)))
    assert link.id == "driver-loaded" and link.evidence.endswith("=2.18.0, wanted 2.20.0")
    assert diagnose(healthy_node(labels=old), cluster(rollout_active=True)).healthy  # a rollout not there yet


def test_vf_count_other_than_driver_config_says() -> None:
    labels = {**healthy_node().labels, node_labels.GPU_VFNUM: "0"}
    refused = facts.EventFacts(event_reasons.VF_COUNT_REFUSED, "GPUs in use", "Warning", "driver", "t")
    link = first(diagnose(healthy_node(labels=labels), events=[refused]))
    assert link.id == "vfs" and link.evidence == f"{node_labels.GPU_VFNUM}=0; last Event VfCountRefused: GPUs in use"
    unreadable = cluster(driver_config=None, driver_config_problem="vfnum: must be a mapping")
    link = first(diagnose(cluster_facts=unreadable))
    assert link.id == "vfs" and "driver-config is unreadable" in link.evidence


def test_a_gpu_vfio_manager_could_not_bind() -> None:
    node = healthy_node(annotations={vfio.ANNOTATION: vfio.annotation_value({0: True, 1: False})})
    event = facts.EventFacts(event_reasons.IOMMU_DISABLED, "enable VT-d", "Warning", "vfio-manager", "t")
    link = first(diagnose(node, events=[event]))
    assert link.id == "vfio-selection"
    assert link.evidence == f"{vfio.ANNOTATION}: GPU(s) 1 not bound to vfio-pci; last Event IOMMUDisabled: enable VT-d"


def test_nothing_allocatable() -> None:
    link = first(diagnose(healthy_node(allocatable={})))
    assert link.id == "allocatable"
    assert "allocatable metax-tech.com/gpu=0" in link.evidence
    assert link.next == f"kubectl -n {NS} logs pod/metax-gpu-device-x1"
    sgpu = {**healthy_node().labels, devices.MODE_LABEL: devices.Mode.SGPU.value}
    only_gpu = {devices.Resource.GPU.value: "3", devices.Resource.VFIO_GPU.value: "1"}
    assert first(diagnose(healthy_node(labels=sgpu, allocatable=only_gpu))).evidence.startswith(
        "allocatable metax-tech.com/sgpu=0"
    )


def test_a_disabled_prerequisite_names_the_blocked_component() -> None:
    d = diagnose(cluster_facts=cluster(spec_with(runtime={"deploy": False})), pod_list=pods(runtime=None))
    link = first(d)
    assert link.id == "driver-deployed"
    assert link.evidence == "driver is enabled but not deployed: disabled prerequisite runtime"
    assert "container-runtime-pod" not in [x.id for x in d.links]  # disabled: not a link


def test_the_chain_follows_the_component_table() -> None:
    with_exporter = cluster(spec_with(exporter={"deploy": True}))
    d = diagnose(cluster_facts=with_exporter, table=TABLE)
    ids = [x.id for x in d.links]
    assert ids.index("allocatable") < ids.index("data-exporter-pod")  # GPUs do not wait for the exporter
    assert first(d).id == "data-exporter-pod"  # its DaemonSet is missing in these facts


def test_summary_states_and_exit_codes() -> None:
    healthy = diagnose()
    cpu = diagnose(facts.NodeFacts("cpu-1"), pod_list=[discovery_pod(node="cpu-1")])
    broken = diagnose(healthy_node(allocatable={}))
    c = cluster()
    summary = doctor_report.summarize([cpu, broken, healthy], c.cr, None)
    assert summary.states == (
        ("ready", (NODE,)),
        ("broken: allocatable", (NODE,)),
        ("no MetaX GPU", ("cpu-1",)),
    )
    assert doctor_report.exit_code([cpu, broken, healthy], summary=summary) == doctor_report.EXIT_BROKEN
    fine = doctor_report.summarize([cpu, healthy], c.cr, None)
    assert doctor_report.exit_code([cpu, healthy], summary=fine) == doctor_report.EXIT_HEALTHY
    not_ready = doctor_report.summarize([healthy], attrs.evolve(c.cr, conditions=()), None)
    assert doctor_report.exit_code([healthy], summary=not_ready) == doctor_report.EXIT_BROKEN
    assert doctor_report.exit_code([cpu]) == doctor_report.EXIT_BROKEN  # asked about by name: no GPU is broken


def test_json_document() -> None:
    document = doctor_report.diagnosis_document(diagnose(healthy_node(allocatable={})))
    assert document["node"] == NODE and document["healthy"] is False
    assert document["firstBroken"]["id"] == "allocatable"
    assert set(document["links"][0]) == {"id", "title", "state", "evidence", "next", "component"}
    assert document["firstBroken"]["state"] == "broken"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}, "restartCount": 2}]}, ("", "")),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull", "message": "no"}}}],
            },
            ("ErrImagePull", "no"),
        ),
        (
            {"phase": "Running", "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]},
            ("Error", ""),
        ),
    ],
)
def test_pod_from_raw(status: dict[str, Any], expected: tuple[str, str]) -> None:
    raw = {
        "metadata": {"name": "p", "labels": {meta.COMPONENT_LABEL: "driver"}},
        "spec": {"nodeName": NODE},
        "status": status,
    }
    parsed = facts.pod_from_raw(raw)
    assert (parsed.waiting_reason, parsed.waiting_message) == expected
    assert parsed.component == "driver" and parsed.node == NODE and not parsed.ready


def test_event_from_raw_takes_the_series_time_and_the_agent() -> None:
    raw = {
        "reason": event_reasons.DRIVER_LOAD_FAILED,
        "note": "n",
        "type": "Warning",
        "action": "driver",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-01-01T00:05:00.000000Z"},
        "regarding": {"kind": "Node", "name": NODE},
    }
    event = facts.event_from_raw(raw)
    assert (event.time, event.action, event.node, event.warning) == (
        "2026-01-01T00:05:00.000000Z",
        "driver",
        NODE,
        True,
    )


def _dra_cluster(**dra: Any) -> facts.ClusterFacts:
    found = cluster(spec_with(draDriver={"deploy": True, **dra}))
    w = components.BY_COMPONENT[Component.DRA_DRIVER].workloads[0]
    selector = {node_labels.GPU_INSTALLED: node_labels.TRUE}
    return attrs.evolve(found, daemonsets={**found.daemonsets, w.name: facts.DaemonSetFacts(w.name, selector)})


def test_a_dra_node_is_checked_for_the_dra_driver_not_for_gpu_device_nor_allocatable_gpus() -> None:
    """R-DRA: on a node the DRA driver serves, no gpu-device pod and no allocatable GPUs is how it should be."""
    labels = {**healthy_node().labels, allocation.LABEL: "dra"}
    on_dra = diagnose(
        healthy_node(labels=labels, allocatable={}),
        _dra_cluster(),
        [*pods(gpuDevice=None), pod(Component.DRA_DRIVER)],
    )
    ids = [x.id for x in on_dra.links]
    assert on_dra.healthy, [(x.id, x.evidence) for x in on_dra.links if not x.holds]
    assert "gpu-device-pod" not in ids and "allocatable" not in ids
    assert ids.index("vfio-manager-ready") < ids.index("dra-driver-pod") < ids.index("dra-driver-ready")
    assert on_dra.links[ids.index("allocator")].evidence.startswith("dra (metax-tech.com/gpu.allocation")
    # the same node without its dra-driver pod: that is the broken link
    missing = diagnose(healthy_node(labels=labels, allocatable={}), _dra_cluster(), pods(gpuDevice=None))
    assert first(missing).id == "dra-driver-pod"


def test_a_device_plugin_node_of_a_dra_cluster_is_checked_as_before_and_an_invalid_label_is_said() -> None:
    labels = {**healthy_node().labels, allocation.LABEL: "DRA"}
    d = diagnose(healthy_node(labels=labels), _dra_cluster())
    ids = [x.id for x in d.links]
    assert d.healthy and "dra-driver-pod" not in ids and ids[-1] == "allocatable"
    assert "'DRA' is not one of device-plugin, dra" in d.links[ids.index("allocator")].evidence
    assert "allocator" not in [x.id for x in diagnose().links]  # DRA off: the chain is as it was


def test_a_runtime_configuration_refused_by_name_is_what_doctor_says() -> None:
    """Issue 37: containerd 1.x with a file loaded after our drop-in that defines the CRI section. The agent refuses
    (its Event's message is the core's refusal, made here by the core itself) and doctor's container-runtime line
    names the file that would hide the handler."""
    from metax_core.errors import InvalidSpec
    from metax_core.runtime import containerd, detect

    later = "/opt/vendor/late.toml"
    vendor = "/etc/containerd/config.d/10-vendor.toml"
    root = 'version = 2\nimports = ["/etc/containerd/config.d/*.toml"]\n'
    cri = '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n'
    with pytest.raises(InvalidSpec) as refused:
        containerd.configure(
            root,
            root_path="/etc/containerd/config.toml",
            schema=detect.containerd_schema((1, 7, 27)),
            loaded={vendor: f'version = 2\nimports = ["{later}"]\n', later: f"version = 2\n{cri}"},
            globs={"/etc/containerd/config.d/*.toml": (vendor,)},
        )
    message = f"cannot configure containerd: {refused.value}"  # services.container_runtime.rounds, as it sends it
    event = facts.EventFacts(event_reasons.RUNTIME_CONFIG_INVALID, message, "Warning", "container-runtime", "t")
    unready = pod(Component.RUNTIME, ready=False, ready_message="containers with unready status: [container-runtime]")
    link = first(diagnose(pod_list=pods(runtime=unready), events=[event]))
    assert link.id == "container-runtime-ready"
    assert f"last Event RuntimeConfigInvalid: cannot configure containerd: {later}: is loaded after" in link.evidence


def test_the_summary_names_the_operator_and_crd_releases_the_operator_reports() -> None:
    """R-UPGRADE: after an upgrade or a rollback, which release runs and which schema the API server serves."""
    cr = facts.CrFacts(None, versions={"operator": "0.2.0", "crd": "0.3.0"})
    assert doctor_report.releases_line(cr, "0.2.0") == "releases: operator 0.2.0, CRD 0.3.0, this CLI 0.2.0"
    assert "operator not reported" in doctor_report.releases_line(facts.CrFacts(None), "0.2.0")


def test_the_health_report_names_the_unhealthy_gpu_and_its_fault() -> None:
    """R-HEALTH: doctor reads the report the node's agent writes (`report.of` + `encode`, as HealthWatch does)."""
    gpu, other = PciAddress("0000:09:00.0"), PciAddress("0000:0a:00.0")
    fine = report.encode(report.of({gpu: verdict.FINE, other: verdict.FINE}, {}, "gpu-device"))
    node = healthy_node(annotations={**healthy_node().annotations, report.ANNOTATION: fine})
    d = diagnose(node)
    assert d.healthy and d.links[-1].id == "gpu-health" and "all 2" in d.links[-1].evidence
    sick = verdict.Verdict((Fault(FaultKind.STATE, "mx-smi reports GPU-State Error"),))
    text = report.encode(report.of({gpu: sick, other: verdict.FINE}, {gpu: ["ml/train"]}, "gpu-device"))
    link = first(diagnose(healthy_node(annotations={**healthy_node().annotations, report.ANNOTATION: text})))
    assert link.id == "gpu-health" and link.component == Component.GPU_DEVICE.value
    assert link.evidence == f"GPUUnusable: {gpu} unusable (StateFault: mx-smi reports GPU-State Error)"
    assert "reason=GPUUnusable" in link.next
    garbled = healthy_node(annotations={report.ANNOTATION: "{"})
    assert "does not read" in first(diagnose(garbled)).evidence
