"""The demo's scripted scenario: what an administrator types, and what the cluster then says, step by step.

Why a module of its own: each step acts the way a person would (apply the CR the chart creates, edit the
``driver-config`` ConfigMap or the CR, run a GPU pod, run ``metax-operator rollout confirm``, uninstall) and
then checks its outcome through the API and the fake hosts; a step that does not reach its outcome raises
`StepFailed`, and the demo exits non-zero. The waits poll the cluster under the fleet's deadline (the time a
person would give the step); a wrong answer that cannot change any more fails at once. One copy of each step
serves both clusters: they talk through `demo_fleet.Fleet` (the `Api` both API servers speak, the hosts).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from metax_core import components, versions
from metax_core.cluster import workloads
from metax_core.components import Component
from metax_core.node import devices, driver_config, labels, vfio
from metax_core.rollout import status as rollout_status
from metax_core.runtime import sdk
from metax_core.spec import converter, validation
from metax_core.spec import model as spec
from metax_core.wire import meta as wire_meta
from metax_dev import fake_sdk
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import standins
from services.cli import rollout as cli_rollout
from services.cli import uninstall as cli_uninstall

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
GPU, VFIO_GPU = devices.Resource.GPU.value, devices.Resource.VFIO_GPU.value
VFIO_CONFIG = converter.camel_case(attrs.fields(spec.VfioManager).vfio_config.name)  # spec.vfioManager.vfioConfig
OLD, NEW = demo_fleet.DRIVER_VERSIONS
VFNUM = 4
MACA_REQUEST = "maca-2.18"
WORKLOAD_IMAGE = "pytorch/pytorch"
STAYS = {"run/cdi": "dir 0o755"}
"""What uninstall leaves on a host by design (docs/operator.md, "What stays on a host"): the CDI directory."""
POLICY: dict[str, Any] = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1, "pauseDuration": 500}, {"replicas": "100%", "pauseDuration": 500}],
    "maxFailureThreshold": 0,
    "fallback": "pause",
}
"""§3.2.8 in small: a canary of one node, then the rest; no retry, the fallback pauses (R-ROLLOUT)."""


class StepFailed(Exception):
    """A step did not reach its outcome; the text says what the cluster said instead."""


S = TypeVar("S")
"""What a scenario's steps act on: a `demo_fleet.Fleet`, or the real-node demo's release (`realnode`)."""


@attrs.frozen
class Step(Generic[S]):
    title: str
    commands: tuple[str, ...]
    run: Callable[[S], list[str]]
    """Acts, waits for the outcome, returns what the cluster now says; StepFailed otherwise."""


class Deadlined(Protocol):
    deadline: float
    """Seconds a step's wait gets."""


def wait_until(
    f: Deadlined,
    what: str,
    check: Callable[[], object],
    said: Callable[[], str] | None = None,
    interval: float = 0.1,
) -> Any:
    """``check()``'s first truthy answer, asked every ``interval`` seconds; StepFailed naming ``what`` (and what
    ``said()`` reads from the cluster then) when the step's deadline (a fleet's, the real-node demo's) passes."""
    deadline = f.deadline
    end = time.monotonic() + deadline
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise StepFailed(f"{what}: not within {deadline:.0f}s" + (f"; the cluster says: {said()}" if said else ""))
        time.sleep(interval)


def _cr_says(f: demo_fleet.Fleet) -> str:
    status = f.cr().get("status") or {}
    rollout = status.get("upgradeStatus") or {}
    return f"phase {status.get('phase')}; driver rollout: {rollout.get('phase')}: {rollout.get('message')}"


def cluster_operator(pod_template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The CR the chart creates from its values (R-INSTALL): the payload driver over the hosts' own, MXMACA SDK
    images, the §3.2.8 policy; topo and the exporter off (topo-master is a Deployment the demo does not run).
    ``pod_template``: the global ``podTemplateSpec`` a cluster needs (the real cluster's process nodes)."""
    body: dict[str, Any] = {
        "registry": demo_fleet.REGISTRY,
        "driver": {"deployPolicy": "PreferCloud", "payload": {"version": OLD}, "upgradePolicy": POLICY},
        "maca": {"payload": {"images": [fake_sdk.reference(v) for v in demo_fleet.MACA_VERSIONS]}},
        "topo": {"deploy": False},
    }
    if pod_template is not None:
        body["podTemplateSpec"] = dict(pod_template)
    return {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": body}


def _labels(f: demo_fleet.Fleet, node: str) -> dict[str, str]:
    return dict(f.node_object(node)["metadata"].get("labels") or {})


def _annotations(f: demo_fleet.Fleet, node: str) -> dict[str, str]:
    return dict(f.node_object(node)["metadata"].get("annotations") or {})


def _allocatable(f: demo_fleet.Fleet, node: str) -> dict[str, str]:
    return dict((f.node_object(node).get("status") or {}).get("allocatable") or {})


def _condition(f: demo_fleet.Fleet, kind: str) -> dict[str, Any] | None:
    conditions = ((f.cr().get("status") or {}).get("upgradeStatus") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _true(f: demo_fleet.Fleet, kind: rollout_status.ConditionType) -> dict[str, Any] | None:
    found = _condition(f, kind.value)
    return found if found is not None and found.get("status") == "True" else None


def install(f: demo_fleet.Fleet) -> list[str]:
    cr = cluster_operator(f.pod_template)
    validation.parse(cr)  # what the webhook admits (raises InvalidSpec naming every field)
    f.objects.apply(cr, field_manager="helm")
    wait_until(
        f,
        "cluster-operator Ready",
        lambda: (f.cr().get("status") or {}).get("phase") == "Ready",
        said=lambda: _cr_says(f),
    )
    components = (f.cr().get("status") or {}).get("components") or []
    shown = ", ".join(f"{c.get('name')}={c.get('state')}" for c in components if c.get("state") != "Disabled")
    return [f"cluster-operator phase Ready: {shown}"]


def labels_and_allocatable(f: demo_fleet.Fleet) -> list[str]:
    said = []
    wanted = {n.name: str(n.gpus) for n in f.nodes}
    wait_until(
        f,
        f"allocatable {GPU} = each node's GPUs",
        lambda: all(_allocatable(f, name).get(GPU) == want for name, want in wanted.items()),
    )
    for n in f.nodes:
        want = wanted[n.name]
        found = _labels(f, n.name)
        if found.get(labels.GPU_COUNT) != want:
            raise StepFailed(f"{n.name}: label {labels.GPU_COUNT}={found.get(labels.GPU_COUNT)}, {want} GPUs")
        product, driver = found.get(labels.GPU_PRODUCT), found.get(labels.DRIVER_VERSION)
        said.append(f"{n.name}: product={product} count={want} driver={driver} allocatable {GPU}={want}")
    discovery = components.GPU_DISCOVERY.name
    for c in f.cpu_nodes:  # gpu-discovery runs everywhere to find GPUs; nothing else comes where it found none
        others = sorted({_workload(p) for p in f.pods(node=c.name)} - {discovery})
        if others or _labels(f, c.name).get(workloads.GPU_NODE_LABEL) == labels.TRUE or GPU in _allocatable(f, c.name):
            raise StepFailed(f"{c.name} (no GPU): pods of {others}, labels {_labels(f, c.name)}")
        said.append(
            f"{c.name}: no GPU: only {discovery} (unprivileged) runs there, no {workloads.GPU_NODE_LABEL}, no {GPU}"
        )
    return said


def _workload(pod: Mapping[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(workloads.APP_LABEL, ""))


def vf_change(f: demo_fleet.Fleet) -> list[str]:
    n = f.nodes[1]
    data = {driver_config.NODE_VFNUMS: f"nodes:\n  {n.name}:\n    vfnum: {VFNUM}\n"}
    f.api.merge_patch(
        "v1", "ConfigMap", driver_config.CONFIGMAP_NAME, {"data": data}, namespace=f.ns, field_manager="kubectl"
    )
    want = str(n.gpus * VFNUM)
    wait_until(
        f,
        f"{n.name}: {GPU}={want} and label {labels.GPU_VFNUM}={VFNUM}",
        lambda: _allocatable(f, n.name).get(GPU) == want and _labels(f, n.name).get(labels.GPU_VFNUM) == str(VFNUM),
    )
    numvfs = [len(n.fake.vfs_of(a)) for a in n.fake.gpu_addresses()]
    if numvfs != [VFNUM] * n.gpus or _labels(f, n.name).get(labels.GPU_VFNUM) != str(VFNUM):
        raise StepFailed(
            f"{n.name}: VFs per GPU {numvfs}, label {labels.GPU_VFNUM}={_labels(f, n.name).get(labels.GPU_VFNUM)}"
        )
    return [
        f"{n.name}: {n.gpus} GPUs x {VFNUM} VFs (the host's sriov_numvfs), label {labels.GPU_VFNUM}={VFNUM}",
        f"{n.name}: allocatable {GPU}={want}",
    ]


def vfio_binding(f: demo_fleet.Fleet) -> list[str]:
    n = f.nodes[0]
    patch = {"spec": {"vfioManager": {VFIO_CONFIG: [{"nodeName": n.name, "gpus": "0,1"}]}}}
    f.api.merge_patch(CR_API, spec.KIND, spec.OBJECT_NAME, patch, field_manager="kubectl")

    def bound() -> str | None:
        text = _annotations(f, n.name).get(vfio.ANNOTATION)
        if text and 0 in json.loads(text).values():
            raise StepFailed(f"{n.name}: vfio-manager says {vfio.ANNOTATION}={text} (a GPU failed to bind)")
        return text if text == '{"0":1,"1":1}' and _allocatable(f, n.name).get(VFIO_GPU) == "2" else None

    text = wait_until(f, f"{n.name}: two GPUs on vfio-pci", bound)
    drivers = [n.fake.driver_of(a) for a in n.fake.gpu_addresses()[:2]]
    if drivers != ["vfio-pci", "vfio-pci"]:
        raise StepFailed(f"{n.name}: the host's first two GPUs are bound to {drivers}")
    alloc = _allocatable(f, n.name)
    return [
        f"{n.name}: annotation {vfio.ANNOTATION}={text}; the host's first two GPUs: {drivers}",
        f"{n.name}: allocatable {GPU}={alloc.get(GPU)}, {VFIO_GPU}={alloc.get(VFIO_GPU)}",
    ]


def train_pod(node: str) -> dict[str, Any]:
    """A user's pod asking two GPUs and an SDK by prefix (R-MACA), bound to ``node``."""
    container = {
        "name": "train",
        "image": WORKLOAD_IMAGE,
        "env": [{"name": versions.ENV_VAR, "value": MACA_REQUEST}],
        "resources": {"limits": {GPU: "2"}},
    }
    spec_ = {"nodeName": node, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "default"}, "spec": spec_}


def workload(f: demo_fleet.Fleet) -> list[str]:
    n = f.nodes[-1]
    f.api.create(train_pod(n.name), field_manager="kubectl")

    def started() -> dict[str, Any] | None:
        pod = f.get("v1", "Pod", "train", "default") or {}
        phase = (pod.get("status") or {}).get("phase")
        uid = pod.get("metadata", {}).get("uid")
        refused = n.workloads.refused.get(uid)
        if phase == "Failed" or refused:
            raise StepFailed(f"pod train failed to start: {refused or pod['status'].get('message')}")
        return pod if phase == "Running" and uid in n.workloads.started else None

    pod = wait_until(f, "pod train Running", started)
    got = n.workloads.started[pod["metadata"]["uid"]]
    installed = sorted(p.name for p in (n.fake.root / sdk.HOST_DIR.lstrip("/")).iterdir())
    answer = versions.resolve(MACA_REQUEST, installed)  # what `metax-operator maca resolve` prints
    held = n.devices.holdings().get(GPU, [])
    f.api.delete("v1", "Pod", "train", "default")
    wait_until(f, "pod train's GPUs released", lambda: not n.devices.holdings())
    if len(got.devices) != 2 or len(held) != 2 or got.maca != answer or sdk.MOUNT_PATH not in got.mounts:
        raise StepFailed(f"pod train got devices {got.devices}, MXMACA {got.maca} at {got.mounts}; resolve: {answer}")
    if str(answer) != "2.18.0.10":
        raise StepFailed(f"{MACA_REQUEST} resolved to {answer}, not the newest 2.18 (2.18.0.10, numerically)")
    return [
        f"pod default/train Running on {n.name}: gpu-device allocated {', '.join(got.devices)}",
        f"container-edit: METAX_MACA_VERSION={MACA_REQUEST} -> MXMACA {got.maca} mounted at {sdk.MOUNT_PATH}",
        f"metax-operator maca resolve {MACA_REQUEST} --available {','.join(installed)} -> {answer}",
        "kubectl delete pod train: its GPUs are free again (the node is idle for the upgrade)",
    ]


def upgrade(f: demo_fleet.Fleet) -> list[str]:
    canary = f.nodes[0]
    canary.fake.fail_module_load(version=NEW, message="Unknown symbol in module (demo: this kernel refuses 2.21.0)")
    patch = {"spec": {"driver": {"payload": {"version": NEW}}}}
    f.api.merge_patch(CR_API, spec.KIND, spec.OBJECT_NAME, patch, field_manager="kubectl")
    failed = wait_until(
        f, "the canary counted failed", lambda: _true(f, rollout_status.ConditionType.FAILED), said=lambda: _cr_says(f)
    )
    others = {n.name: n.fake.module_version("metax") for n in f.nodes[1:]}
    if any(v != OLD for v in others.values()):
        raise StepFailed(f"nodes upgraded past a failed canary: {others}")
    return [
        f"Failed=True ({failed.get('reason')}): {failed.get('message')}",
        f"the other nodes stay on {OLD}: {others}",
    ]


def fallback(f: demo_fleet.Fleet) -> list[str]:
    canary = f.nodes[0]

    def paused_by_fallback() -> dict[str, Any] | None:
        found = _condition(f, rollout_status.ConditionType.PROGRESSING.value)
        return found if found is not None and found.get("reason") == "FallbackPaused" else None

    paused = wait_until(f, "the fallback pauses", paused_by_fallback, said=lambda: _cr_says(f))
    token = ((f.cr().get("status") or {}).get("upgradeStatus") or {}).get("status", {}).get("confirmToken")
    if not token:
        raise StepFailed("the paused rollout has no confirmToken for `metax-operator rollout confirm`")
    # driver-manager restores the previous driver after each refused load and retries with back-off: between
    # two attempts the canary runs OLD again (during one it has none for a moment, as on a real node).
    wait_until(f, f"{canary.name} back on {OLD}", lambda: canary.fake.module_version("metax") == OLD)
    return [
        f"Progressing=False ({paused.get('reason')}): {paused.get('message')}",
        f"{canary.name}: driver-manager put {OLD} back after the refused load; it retries {NEW} with back-off",
    ]


def confirm(f: demo_fleet.Fleet) -> list[str]:
    canary = f.nodes[0]
    canary.fake.clear_faults()  # the administrator fixes the canary's kernel ...
    for pod in f.pods(Component.DRIVER.value, node=canary.name):  # ... and restarts its driver pod (not its back-off)
        f.api.delete("v1", "Pod", pod["metadata"]["name"], demo_fleet.NAMESPACE)
    wait_until(f, f"{canary.name} loads {NEW} after the fix", lambda: canary.fake.module_version("metax") == NEW)

    def driver_pods_ready() -> bool:
        pods = f.pods(Component.DRIVER.value)
        return len(pods) == len(f.nodes) and all(standins.pod_ready(p) for p in pods)

    wait_until(f, f"{canary.name}'s driver pod Ready", driver_pods_ready)
    f.settle()  # the status now waits on the fleet as it is: the token read next is the one the operator checks
    if cli_rollout.confirm_waiting_step(f.api, None) != 0:
        raise StepFailed("metax-operator rollout confirm found no step to confirm")
    wait_until(f, "rollout Succeed", lambda: _true(f, rollout_status.ConditionType.SUCCEED), said=lambda: _cr_says(f))
    wait_until(f, f"every node on {NEW}", lambda: all(n.fake.module_version("metax") == NEW for n in f.nodes))
    phase = ((f.cr().get("status") or {}).get("upgradeStatus") or {}).get("phase")
    return [
        f"{canary.name}: {NEW} loaded after the fix; the rollout went on to every node",
        f"upgradeStatus phase {phase}, Succeed=True; every host's metax module is {NEW}",
    ]


def uninstall(f: demo_fleet.Fleet) -> list[str]:
    said = [cli_uninstall.delete_and_wait(f.api, f.deadline, interval=0.2)]
    wait_until(f, "every operator pod gone", lambda: not f.pods())
    for n in [*f.nodes, *f.cpu_nodes]:
        left = [k for k in _labels(f, n.name) if k.startswith(wire_meta.PREFIX)]
        left += [k for k in _annotations(f, n.name) if k.startswith(wire_meta.PREFIX)]
        if left:
            raise StepFailed(f"{n.name}: keys left on the Node: {left}")
        changes = n.changes(allowed=STAYS if n.gpus else None)  # gpu-device (CDI) runs on GPU nodes only
        module = (n.fake.module_version("metax"), n.fake.module_params("metax"))
        if changes or module != n.module_before:
            raise StepFailed(f"{n.name}: host differs from before install: {changes[:5]}, module {module}")
        said.append(f"{n.name}: byte-identical to before install ({len(n.before)} paths), metax {module[0]} back")
    said.append(f"(apart from what docs/operator.md says stays: {', '.join('/' + p for p in STAYS)}, empty, on tmpfs)")
    return said


def _json(body: Mapping[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def _patch(target: str, body: dict[str, Any], namespace: str = "") -> str:
    where = f"-n {namespace} " if namespace else ""
    return f"kubectl {where}patch {target} --type merge -p '{_json(body)}'"


def steps(f: demo_fleet.Fleet) -> Sequence[Step[demo_fleet.Fleet]]:
    n0, n1, last = f.nodes[0].name, f.nodes[1].name, f.nodes[-1].name
    co = "clusteroperators.gpu.metax-tech.com cluster-operator"
    vfnums = {"data": {driver_config.NODE_VFNUMS: f"nodes:\n  {n1}:\n    vfnum: {VFNUM}\n"}}
    vfio_config = {"spec": {"vfioManager": {VFIO_CONFIG: [{"nodeName": n0, "gpus": "0,1"}]}}}
    helm = "helm install metax-operator charts/metax-operator -n metax-operator --create-namespace"
    run = f"kubectl run train --image={WORKLOAD_IMAGE} --env=METAX_MACA_VERSION={MACA_REQUEST}"
    placed = "" if f.pod_template is None else f" --set-json 'podTemplateSpec={_json(f.pod_template)}'"
    overrides = {"spec": {"nodeName": last, "containers": [{"name": "train", "resources": {"limits": {GPU: "2"}}}]}}
    return (
        Step(
            "Install",
            (
                f"{helm} --set registry={demo_fleet.REGISTRY} --set driver.payload.version={OLD}{placed}",
                f"kubectl get {co}",
            ),
            install,
        ),
        Step(
            "Labels and allocatable GPUs",
            (
                f"kubectl get nodes -L {labels.GPU_PRODUCT},{labels.GPU_COUNT},{labels.DRIVER_VERSION}",
                "kubectl get nodes -o custom-columns=NAME:.metadata.name,GPU:.status.allocatable.metax-tech\\.com/gpu",
            ),
            labels_and_allocatable,
        ),
        Step(
            f"VFs on {n1} (driver-config, R-VF)",
            (_patch("configmap driver-config", vfnums, demo_fleet.NAMESPACE),),
            vf_change,
        ),
        Step(f"Two GPUs of {n0} on vfio-pci (R-VFIO)", (_patch(co, vfio_config),), vfio_binding),
        Step(
            f"A GPU workload asking {MACA_REQUEST} (R-MACA)",
            (f"{run} --overrides='{json.dumps(overrides, separators=(',', ':'))}'", "kubectl delete pod train"),
            workload,
        ),
        Step(
            f"Driver upgrade {OLD} -> {NEW}; {n0}, the canary, refuses it (R-ROLLOUT, §3.2.8)",
            (
                f"# {n0}'s kernel will refuse {NEW} (the fake host's fault fail_module_load)",
                _patch(co, {"spec": {"driver": {"payload": {"version": NEW}}}}),
            ),
            upgrade,
        ),
        Step("The policy's fallback: pause", (f"kubectl get {co} -o jsonpath='{{.status.upgradeStatus}}'",), fallback),
        Step(
            f"Fix {n0}, confirm: the rollout resumes",
            (
                f"# the administrator fixes {n0} (the fault is cleared), then restarts its driver pod:",
                f"kubectl -n {demo_fleet.NAMESPACE} delete pod -l {workloads.COMPONENT_LABEL}={Component.DRIVER.value} "
                f"--field-selector spec.nodeName={n0}",
                "metax-operator rollout confirm",
            ),
            confirm,
        ),
        Step(
            "Uninstall: every host as it was found (R-INSTALL)",
            (
                "helm uninstall metax-operator -n metax-operator --wait",
                "# its pre-delete hook runs `metax-operator uninstall`: delete cluster-operator, wait for the cleanup",
            ),
            uninstall,
        ),
    )
