"""`metax-dev demo --cluster real --real-node`: the product from its own images on a real node, step by step.

Why a module of its own: on a real node (kubelet + containerd + runc built here, `metax_dev.realnode`) every
component is a pod from the product's images, installed with the real ``helm install``, so the scenario is the
part of the in-memory one that a real node can run (docs/demo.md "On a real node"): install → labels and
allocatable GPUs → a workload with two GPUs and an SDK prefix, placed through the gpu-scheduler extender and
scraped per pod → the node switched to DRA and a claimed pod → ``helm uninstall``, after which the fake host and
the node's containerd configuration are as they were. The VF change, the vfio binding and the failed driver
upgrade need the fake kernel: driver-manager's module tools in a pod act on this machine's kernel
(docs/realnode.md), so they stay the in-memory and process-node demos' steps.

Each step runs the commands it prints (helm, kubectl, the scheduler's configuration) and checks its outcome
through the API server, the pods and the host; the harness is `metax_dev.productnode`, the one the end-to-end
test uses.
"""

from __future__ import annotations

import argparse
import json
import shlex
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from rich import box
from rich.console import Console
from rich.table import Table

from metax_core import release, versions
from metax_core.cluster import workloads as rendered
from metax_core.dra import slices
from metax_core.metrics import names as metric_names
from metax_core.node import allocation, labels
from metax_core.runtime import handler
from metax_core.topology import extender
from metax_core.wire import host
from metax_core.wire import meta as wire_meta
from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import player, realcli, scenario
from metax_dev.images import build as images_build
from metax_dev.productnode import helm_release
from metax_dev.productnode import workloads as pods
from metax_dev.productnode.helm_release import NAMESPACE, Release

GPU = scenario.GPU
MACA_REQUEST = scenario.MACA_REQUEST
#: The MXMACA versions the maca pod installs (fake SDK payload images): the request resolves to the first.
SDK_VERSIONS = helm_release.SDK_VERSIONS
WORKLOAD, CLAIMED, TEMPLATE = "train", "claimed", "two-gpus"
WORKLOAD_NS = "default"
NODE_PREFIX = "demo-node"
STAND_INS = (
    "the node: a real kubelet, containerd and runc built here, on this machine, in their own mount and network "
    "namespaces; its /dev, /sys and host paths are a fake MetaX host's (2 GPUs, driver "
    f"{helm_release.DRIVER_VERSION} loaded), through the TEST-ONLY chart value operator.testOnly.hostPathPrefix",
    "the node's containerd runs under Debian's daemontools supervise (as under systemd's Restart=always), so the "
    "container-runtime pod restarts it by signal (runtime.restartMode=signal); the maca pod installs fake MXMACA "
    f"{' and '.join(SDK_VERSIONS)} from test payload images",
    "the driver payload image: a test image with the fake host's own driver version (driver-manager keeps it: "
    "its module tools would act on this machine's kernel)",
)


@attrs.define
class RealNodeDemo:
    """The release on its node, and what the scenario records as it goes."""

    release: Release
    core: Any
    """The admin's ``kubernetes.client.CoreV1Api`` on the control plane (Any: its models' fields are Optional
    throughout, and a pod read back here always has its spec, status and metadata)."""
    deadline: float = 180.0
    """Seconds a step's wait gets (a real node at load: image starts, probes, restarts)."""
    scheduler_extended: bool = False

    @property
    def plane(self) -> controlplane.ControlPlane:
        return self.release.plane

    @property
    def node(self) -> str:
        return self.release.node

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(pod, phase, ready, image) of every pod in the operator's namespace and the workloads', read through
        the API (`kubectl get pods` in both namespaces)."""
        found = []
        for namespace in (NAMESPACE, WORKLOAD_NS):
            for pod in self.core.list_namespaced_pod(namespace).items:
                statuses = pod.status.container_statuses or []
                ready = f"{sum(bool(s.ready) for s in statuses)}/{len(pod.spec.containers)}"
                found.append(
                    (f"{namespace}/{pod.metadata.name}", str(pod.status.phase), ready, pod.spec.containers[0].image)
                )
        return sorted(found)

    def lines(self) -> list[str]:
        return [f"{pod}: {phase}, {ready} ready, {image}" for pod, phase, ready, image in self.rows()]

    def table(self) -> Table:
        shown = Table(title=f"pods on {self.node} (live)", box=box.SIMPLE)
        for column in ("pod", "phase", "ready", "image"):
            shown.add_column(column)
        for row in self.rows():
            shown.add_row(*row)
        return shown


def _wait(d: RealNodeDemo, what: str, check: Callable[[], Any], said: Callable[[], str] | None = None) -> Any:
    """`scenario.wait_until` every half second: a check here may be a kubectl process."""
    return scenario.wait_until(d, what, check, said, interval=0.5)


def _kubectl_json(d: RealNodeDemo, *args: str) -> dict[str, Any]:
    done = d.release.kubectl(*args, "-o", "json")
    if done.returncode != 0:
        raise scenario.StepFailed(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _ours(d: RealNodeDemo, name: str) -> list[dict[str, Any]]:
    return helm_release.component_pods(d.release, name)


def _ready(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def _cr_status(d: RealNodeDemo) -> dict[str, Any]:
    done = d.release.kubectl("get", "clusteroperators", "cluster-operator", "-o", "json")
    return (json.loads(done.stdout).get("status") or {}) if done.returncode == 0 else {}


def _node_meta(d: RealNodeDemo) -> Any:
    return d.core.read_node(d.node).metadata


def _allocatable(d: RealNodeDemo) -> str:
    return str((d.core.read_node(d.node).status.allocatable or {}).get(GPU, "0"))


def install(d: RealNodeDemo) -> list[str]:
    d.release.helm(*d.release.install_args(), timeout=d.deadline + 60)

    def ready() -> dict[str, Any] | None:
        status = _cr_status(d)
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return status if conditions.get("Ready", {}).get("status") == "True" else None

    status = _wait(d, "cluster-operator Ready", ready, said=lambda: json.dumps(_cr_status(d))[:600])
    for name in (*helm_release.AGENTS, *helm_release.DEPLOYMENTS, "metax-operator"):
        found = _ours(d, name)
        if len(found) != 1 or not _ready(found[0]):
            raise scenario.StepFailed(f"{name}: pods {[p['metadata']['name'] for p in found]}, not one Ready pod")
        image = found[0]["status"]["containerStatuses"][0]["image"]
        if not image.endswith(f"/{name}:{release.running()}"):
            raise scenario.StepFailed(f"{name}'s pod runs {image}, not the product's image {name}")
    shown = ", ".join(f"{c['name']}={c['state']}" for c in status.get("components") or [] if c["state"] != "Disabled")
    return [
        f"cluster-operator phase {status.get('phase')}: {shown}",
        f"{len(helm_release.AGENTS)} node agents and {len(helm_release.DEPLOYMENTS) + 1} Deployments, each a pod of "
        f"its own image (docker.io/library/<component>:{release.running()}), Ready",
    ]


def labels_and_allocatable(d: RealNodeDemo) -> list[str]:
    want = str(helm_release.PFS)
    _wait(d, f"allocatable {GPU}={want}", lambda: _allocatable(d) == want, said=lambda: _allocatable(d))
    found = _node_meta(d).labels or {}
    if found.get(labels.GPU_COUNT) != want or found.get(rendered.GPU_NODE_LABEL) != labels.TRUE:
        raise scenario.StepFailed(f"{d.node}: labels {found}")
    return [
        f"{d.node}: product={found.get(labels.GPU_PRODUCT)} count={found.get(labels.GPU_COUNT)} "
        f"driver={found.get(labels.DRIVER_VERSION)} (gpu-label's pod)",
        f"{d.node}: allocatable {GPU}={want} (gpu-device's pod registered with the node's kubelet over gRPC)",
    ]


def _extender_calls(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as answer:
        families = {f.name: f for f in text_string_to_metric_families(answer.read().decode())}
    family = families.get(extender.REQUESTS_METRIC)
    samples = family.samples if family is not None else []
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels.get("verb") == "filter")


def workload(d: RealNodeDemo) -> list[str]:
    base = f"http://{_ours(d, 'metax-gpu-scheduler')[0]['status']['podIP']}:{extender.PORT}"
    d.plane.restart_scheduler([extender.scheduler_extender(base, timeout_seconds=2)])
    d.scheduler_extended = True
    before = _extender_calls(base + extender.METRICS_PATH)
    script = pods.PRINT_SDK + pods.LIST_DEVICES + f"echo {pods.DONE}; sleep 3600"
    pod = pods.scheduled_pod(WORKLOAD, d.node, script, {GPU: "2"})
    pod["spec"]["runtimeClassName"] = handler.RUNTIME_HANDLER
    pod["spec"]["containers"][0]["env"] = [{"name": versions.ENV_VAR, "value": MACA_REQUEST}]
    d.core.create_namespaced_pod(WORKLOAD_NS, pod)
    text = _wait_logs(d, WORKLOAD)
    placed = d.core.read_namespaced_pod(WORKLOAD, WORKLOAD_NS).spec.node_name
    calls = _extender_calls(base + extender.METRICS_PATH)
    visible = sorted((pods.printed(text, "VISIBLE") or "").split(","))
    every = sorted(str(a) for a in d.release.fake.gpu_addresses())
    resolved = pods.printed(text, "RESOLVED")
    if placed != d.node or calls <= before or visible != every or resolved != SDK_VERSIONS[0]:
        raise scenario.StepFailed(
            f"pod {WORKLOAD}: on {placed}, extender filter calls {before} -> {calls}, devices {visible}, "
            f"MXMACA {resolved}; its log:\n{text}"
        )
    nodes = sorted(pods.device_lines(text))
    return [
        f"kube-scheduler asked gpu-scheduler (filter calls {before:.0f} -> {calls:.0f}) and bound {WORKLOAD} "
        f"to {placed}",
        f"{WORKLOAD} sees METAX_VISIBLE_DEVICES={','.join(visible)} and {', '.join(nodes)} (CDI from gpu-device's pod)",
        f"METAX_MACA_VERSION={MACA_REQUEST} -> MXMACA {resolved} read-only at /opt/maca (the runtime wrapper and "
        "the maca agent's container-edit service)",
    ]


def _wait_logs(d: RealNodeDemo, name: str) -> str:
    def done() -> str:
        got = d.core.read_namespaced_pod(name, WORKLOAD_NS)
        if got.status.phase == "Failed":
            raise scenario.StepFailed(f"pod {name} failed: {got.status.message or got.status.reason}")
        if got.status.phase != "Running":
            return ""
        text = str(d.core.read_namespaced_pod_log(name, WORKLOAD_NS))
        return text if pods.DONE in text else ""

    def said() -> str:
        events = d.core.list_namespaced_event(WORKLOAD_NS, field_selector=f"involvedObject.name={name}").items
        return "; ".join(f"{e.reason}: {e.message}" for e in events[-5:])

    result: str = _wait(d, f"pod {name} Running and printed what it sees", done, said)
    return result


def metrics(d: RealNodeDemo) -> list[str]:
    exporter = _ours(d, "metax-data-exporter")[0]
    url = f"http://{exporter['status']['podIP']}:{rendered.EXPORTER_PORT}/metrics"
    name = metric_names.GPU_USAGE.name

    def attributed() -> list[Any]:
        with urllib.request.urlopen(url, timeout=5) as answer:
            families = {f.name: f for f in text_string_to_metric_families(answer.read().decode())}
        found = [s for s in (families[name].samples if name in families else []) if s.labels.get("pod") == WORKLOAD]
        return found if len(found) == helm_release.PFS else []

    found = _wait(d, f"{name} of both GPUs attributed to pod {WORKLOAD}", attributed)
    d.core.delete_namespaced_pod(WORKLOAD, WORKLOAD_NS, grace_period_seconds=0)
    _wait(d, f"pod {WORKLOAD} gone", lambda: not _exists(d, WORKLOAD))
    _wait(d, f"{GPU} free again", lambda: _allocatable(d) == str(helm_release.PFS))
    return [
        f"{name}{{pci_address={s.labels.get('pci_address')}, namespace={s.labels.get('namespace')}, "
        f"pod={s.labels.get('pod')}, container={s.labels.get('container')}}} {s.value:g}"
        for s in sorted(found, key=lambda s: s.labels.get("pci_address", ""))
    ] + [f"kubectl delete pod {WORKLOAD}: its GPUs are free again"]


def _exists(d: RealNodeDemo, name: str) -> bool:
    return any(p.metadata.name == name for p in d.core.list_namespaced_pod(WORKLOAD_NS).items)


def dra(d: RealNodeDemo) -> list[str]:
    d.core.patch_node(d.node, {"metadata": {"labels": {allocation.LABEL: allocation.Allocator.DRA.value}}})
    _wait(
        d,
        "gpu-device's pod gone and the dra-driver's Ready",
        lambda: not _ours(d, "metax-gpu-device") and [p for p in _ours(d, "metax-dra-driver") if _ready(p)],
    )

    def published() -> dict[str, Any]:
        items = _kubectl_json(d, "get", "resourceslices", f"--field-selector=spec.nodeName={d.node}")["items"]
        found = slices.published_in(items, d.node)
        return found if len(found) == helm_release.PFS else {}

    devices = _wait(d, "the node's GPUs in a ResourceSlice", published)
    cdi = d.release.fake.root / "var/run/cdi"
    specs = set(cdi.iterdir())
    d.release.kubectl("apply", "-n", WORKLOAD_NS, "-f", "-", stdin=json.dumps(pods.claim_template(TEMPLATE, 2)))
    script = pods.LIST_DEVICES + f"echo {pods.DONE}; sleep 3600"
    d.core.create_namespaced_pod(WORKLOAD_NS, pods.claimed_pod(CLAIMED, d.node, script, TEMPLATE))
    seen = sorted(pods.device_lines(_wait_logs(d, CLAIMED)))
    if not [p for p in seen if p.startswith(host.DRI_DIR + "/")]:
        raise scenario.StepFailed(f"pod {CLAIMED} sees no GPU device node: {seen}")
    claim = next(iter(set(cdi.iterdir()) - specs), None)
    d.core.delete_namespaced_pod(CLAIMED, WORKLOAD_NS, grace_period_seconds=0)
    _wait(
        d,
        f"pod {CLAIMED} gone and its claim unprepared",
        lambda: not _exists(d, CLAIMED) and set(cdi.iterdir()) == specs,
    )
    d.release.kubectl("delete", "resourceclaimtemplate", TEMPLATE, "-n", WORKLOAD_NS)
    d.core.patch_node(d.node, {"metadata": {"labels": {allocation.LABEL: None}}})
    _wait(
        d,
        f"gpu-device back on {d.node} and {GPU}={helm_release.PFS}",
        lambda: not _ours(d, "metax-dra-driver") and _allocatable(d) == str(helm_release.PFS),
    )
    return [
        f"{d.node}: the dra-driver's pod published {', '.join(sorted(devices))} in a ResourceSlice",
        f"pod {CLAIMED} (a claim from ResourceClaimTemplate {TEMPLATE}, 2 GPUs) saw {', '.join(seen)}",
        f"its claim's CDI spec {claim.name if claim else '?'} came and went with it (prepared, then unprepared)",
        f"drained and switched back: gpu-device's pod again, allocatable {GPU}={helm_release.PFS}",
    ]


def uninstall(d: RealNodeDemo) -> list[str]:
    d.plane.restart_scheduler(())  # the extender goes with the release: out of the scheduler's configuration first
    d.scheduler_extended = False
    _wait(d, "the GPU workloads' sandboxes removed by the kubelet", lambda: not d.release.metax_sandboxes())
    d.release.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait", timeout=d.deadline + 60)
    _wait(d, "every pod of ours gone", lambda: not helm_release.pods(d.release))
    meta = _node_meta(d)
    left = [k for k in {**(meta.labels or {}), **(meta.annotations or {})} if k.startswith(wire_meta.PREFIX)]
    files = helm_release.host_files(d.release.fake.root)
    if left or files != d.release.host_before:
        raise scenario.StepFailed(
            f"{d.node}: keys left {left}; host files added {sorted(files - d.release.host_before)[:5]}, "
            f"removed {sorted(d.release.host_before - files)[:5]}"
        )
    if d.release.runtime_config() != d.release.runtime_before:
        raise scenario.StepFailed(f"{d.node}: containerd's root file not restored (bytes or mode)")
    if (d.release.fake.root / "etc/containerd/conf.d").exists():
        raise scenario.StepFailed(f"{d.node}: container-runtime's drop-in directory is left")
    return [
        "kube-scheduler's configuration without the extender entry again",
        f"the pre-delete Job ran `metax-operator uninstall`; no pod, object or metax-tech.com key of ours is left on "
        f"{d.node}",
        f"the fake host: the agents' directories as before ({len(d.release.host_before)} paths)",
        "container-runtime's pod gave containerd its root file back, byte- and mode-identical, no drop-in, and "
        "restarted it by signal",
    ]


def steps(d: RealNodeDemo) -> Sequence[scenario.Step[RealNodeDemo]]:
    helm = shlex.join(["helm", *d.release.install_args()])
    run = f"kubectl run {WORKLOAD} --image=busybox --env=METAX_MACA_VERSION={MACA_REQUEST}"
    extended = "# kube-scheduler's configuration: extenders: [{urlPrefix: http://<gpu-scheduler>:8088, ...}]"
    return (
        scenario.Step("Install from the product's images", (helm, "kubectl get clusteroperator,pods"), install),
        scenario.Step(
            "Labels and allocatable GPUs",
            (f"kubectl get node {d.node} -L {labels.GPU_PRODUCT},{labels.GPU_COUNT},{labels.DRIVER_VERSION}",),
            labels_and_allocatable,
        ),
        scenario.Step(
            f"A workload with two GPUs asking {MACA_REQUEST}, placed through the extender (R-MACA, C9)",
            (extended, f'{run} --overrides=\'{{"spec":{{"runtimeClassName":"metax", ...{GPU}: 2}}}}\''),
            workload,
        ),
        scenario.Step(
            "Its GPUs' metrics, per pod (R-EXPORTER)",
            (f"curl http://<data-exporter pod>:{rendered.EXPORTER_PORT}/metrics", f"kubectl delete pod {WORKLOAD}"),
            metrics,
        ),
        scenario.Step(
            f"{d.node} on DRA: a claimed pod (R-DRA)",
            (
                f"kubectl label node {d.node} {allocation.LABEL}={allocation.Allocator.DRA.value}",
                f"kubectl create -f resourceclaimtemplate-{TEMPLATE}.yaml; kubectl create -f pod-{CLAIMED}.yaml",
                f"kubectl delete pod {CLAIMED}; kubectl label node {d.node} {allocation.LABEL}-",
            ),
            dra,
        ),
        scenario.Step(
            "Uninstall: the host and containerd as they were (R-INSTALL)",
            (f"helm uninstall {helm_release.RELEASE} -n {NAMESPACE} --wait",),
            uninstall,
        ),
    )


Observer = Callable[[Release], None]
"""Called with the node once it is Ready, before anything of the product is on it, and again after the scenario,
before the teardown (tests read the host and the API there)."""


def on_node(
    console: Console,
    args: argparse.Namespace,
    observe: Observer | None,
    plane: controlplane.ControlPlane,
    workdir: Path,
) -> int:
    """The scenario on a real node of ``plane``: the images built (or found in their cache), the node started
    with them; everything the scenario left torn down after."""
    console.print("Building (or finding) the product's images (./run images, cached) ...")
    built = images_build.build()
    console.print("Starting a real node (kubelet, containerd, runc) on a fake 2-GPU host, importing the images ...")
    with helm_release.real_node(plane, built, prefix=NODE_PREFIX) as release:
        if observe is not None:
            observe(release)
        release.host_before = helm_release.host_files(release.fake.root)
        api = plane.api_client()
        d = RealNodeDemo(release, client.CoreV1Api(api))
        try:
            return _on(console, args, observe, d, workdir)
        finally:
            _tear_down(d)
            api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


def _on(console: Console, args: argparse.Namespace, observe: Observer | None, d: RealNodeDemo, workdir: Path) -> int:
    console.print(
        f"[bold]MetaX GPU Operator demo on a real node[/bold]: {d.node}, {helm_release.PFS} GPUs; every component a "
        f"pod of the product's images, installed with helm; kube-apiserver at {d.plane.server_url}"
    )
    console.print("What stands in for what needs real hardware:")
    for line in STAND_INS:
        console.print(f"  - {line}")
    config = realcli.kubeconfig(d.plane, workdir)
    console.print(f"kubeconfig: {config} (the admin's, namespace {NAMESPACE})")
    console.print("watch it from another terminal:")
    for command in realcli.watch_commands(d.plane, config):
        console.print(f"  {command}", markup=False, highlight=False)
    code = player.play(
        console,
        steps(d),
        d,
        lines=d.lines,
        table=None if args.no_live else d.table,
        logs=[workdir / "demo.log"],
        failures=(helm_release.ReleaseError, ApiException, RuntimeError),
    )
    if observe is not None:
        observe(d.release)
    if args.keep:
        if code == player.EXIT_OK:  # the scenario ended with the uninstall: install again, to have pods to watch
            d.release.helm(*d.release.install_args(), timeout=d.deadline + 60)
            console.print("--keep: installed again (the scenario's helm install): the pods come back")
        realcli.keep(console, d.plane, config, what="the node and the product's pods")
    return code


def _tear_down(d: RealNodeDemo) -> None:
    """What the scenario (or --keep) left: the release (its uninstall restores containerd's configuration) and the
    scheduler's extender entry."""
    if helm_release.RELEASE in d.release.helm("list", "-n", NAMESPACE, "-q", check=False).stdout:
        d.release.helm("uninstall", helm_release.RELEASE, "-n", NAMESPACE, "--wait", check=False)
    if d.scheduler_extended:
        d.plane.restart_scheduler(())
