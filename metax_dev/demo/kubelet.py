"""The demo's kubelet stand-in: each pod on a node runs its agent's composition root in a thread.

Why a module of its own: this is where a pod the operator rendered becomes a running agent, and it must use
the same code the images run. The environment is the pod's (`metax_dev.processnode.podspec.environment`: the
downward API, ``$(VAR)``), its paths rewritten by the pod's mount table (`metax_dev.processnode.standins`:
``/host/...`` onto the fake host's root, the payload emptyDir onto the pod's directory, ``/tmp`` onto the
pod's own); then the agent's settings loader and its ``bootstrap`` with the fake host's hardware (the real
`metax_hw` adapters on its root) and the in-memory cluster ports. The pod is Ready while the file of its exec
readiness probe (``test -f $METAX_PROBE_FILE``) exists, as the kubelet would find.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from metax_core import components
from metax_core.cluster import workloads
from metax_core.components import Component
from metax_core.wire import agent_env
from metax_dev.demo import intervals, standins, workload
from metax_dev.processnode import podspec
from metax_dev.processnode import standins as process_standins

log = logging.getLogger(__name__)

Runner = Callable[[threading.Event], None]


def _gpu_label(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.gpu_label import agent, bootstrap

    s = bootstrap.RECIPE.settings(env)
    built = bootstrap.RECIPE.bootstrap(s, hw=agent.Hardware.of(node.fake.hw), ports=node.ports("gpu-label"))
    return bootstrap.RECIPE.runner(built)


def _gpu_discovery(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.gpu_label import discovery

    s = discovery.RECIPE.settings(env)
    hw = discovery.Hardware(node.fake.hw.devices)
    built = discovery.RECIPE.bootstrap(s, hw=hw, ports=node.ports(discovery.COMPONENT))
    return discovery.RECIPE.runner(built)


def _driver(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.driver_manager import agent, bootstrap, config

    s = config.from_env(env, host_module_tools=False)  # the fake host's modprobe (metax_dev.agents does the same)
    built = bootstrap.RECIPE.bootstrap(s, hw=agent.Hardware.of(node.fake.hw), ports=node.ports("driver"))
    return bootstrap.RECIPE.runner(built)


def _vfio(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.vfio_manager import agent, bootstrap

    s = bootstrap.RECIPE.settings(env)
    built = bootstrap.RECIPE.bootstrap(s, hw=agent.Hardware.of(node.fake.hw), ports=node.ports("vfio-manager"))
    return bootstrap.RECIPE.runner(built)


def _maca(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.maca import bootstrap

    built = bootstrap.RECIPE.bootstrap(bootstrap.RECIPE.settings(env), ports=node.ports("maca"))
    return bootstrap.RECIPE.runner(built)


def _topo(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.topo_worker import agent, bootstrap

    hw = agent.Hardware.of(node.fake.hw, held=node.devices.holdings)
    built = bootstrap.RECIPE.bootstrap(bootstrap.RECIPE.settings(env), hw=hw, ports=node.ports(agent.COMPONENT))
    return bootstrap.RECIPE.runner(built)


def _gpu_device(env: Mapping[str, str], node: standins.NodeContext) -> Runner:
    from services.gpu_device import bootstrap, config

    fake = node.fake
    built = bootstrap.bootstrap(
        config.from_env(env),
        inventory=fake.devices,
        monitor=fake.monitor,
        nodes=node.k8s.node_metadata,
        plugin_factory=node.devices.plugin,
        held=node.devices.holdings,
    )
    return built.run


AGENTS: Mapping[str, Callable[[Mapping[str, str], standins.NodeContext], Runner]] = {
    components.GPU_DISCOVERY.name: _gpu_discovery,  # gpu-label's component, its own workload: by the pod's app label
    Component.GPU_LABEL.value: _gpu_label,
    Component.DRIVER.value: _driver,
    Component.VFIO_MANAGER.value: _vfio,
    Component.MACA.value: _maca,
    Component.TOPO.value: _topo,
    Component.GPU_DEVICE.value: _gpu_device,
}
"""The agents that run their own composition root here, by the pods' workload (app label), else component label."""

SIDECARS = ("container-edit",)
"""Containers of an agent's pod not run as a thread: maca's container-edit serves the runtime wrapper's socket;
here its ``Editor`` is built from its environment when a GPU pod starts (`metax_dev.demo.workload`)."""

FAST = intervals.FAST


class Running:
    def __init__(
        self,
        pod: str,
        thread: threading.Thread,
        stop: threading.Event,
        probe: Path | None,
        edit_env: dict[str, str] | None = None,
    ) -> None:
        self.pod, self.thread, self.stop, self.probe, self.edit_env = pod, thread, stop, probe, edit_env


class Kubelet:
    """One node's pods: started from their spec, stopped when deleted, their Ready condition kept."""

    def __init__(self, node: standins.NodeContext, workdir: Path, payloads: Mapping[str, Path], namespace: str) -> None:
        self.node, self.workdir, self.payloads, self.ns = node, workdir, payloads, namespace
        self.running: dict[str, Running] = {}
        self.failed: dict[str, str] = {}
        self.workloads = workload.Workloads(node.devices)
        self.edit_env: dict[str, str] | None = None
        """The container-edit container's environment in this node's maca pod (None while there is none)."""
        self._count = 0

    def sync(self, every_pod: Sequence[Mapping[str, Any]]) -> None:
        """Start, stop and report this node's pods, from ``every_pod`` (one list of the cluster's pods)."""
        pods = {  # by uid: a pod deleted and created again under its name (OnDelete) is a new pod
            p["metadata"]["uid"]: p
            for p in every_pod
            if p["metadata"].get("namespace") == self.ns and p["spec"].get("nodeName") == self.node.name
        }
        for uid in [u for u in self.running if u not in pods]:
            self._stop(uid)
        for uid, pod in pods.items():
            if uid not in self.running and uid not in self.failed:
                self._start(pod)
            self._report(pod)
        self._sync_workloads(every_pod)

    def _sync_workloads(self, every_pod: Sequence[Mapping[str, Any]]) -> None:
        """Users' GPU pods (any other namespace) bound to this node: admitted once, released when deleted."""
        api = self.node.k8s.api
        mine = [
            p
            for p in every_pod
            if p["metadata"].get("namespace") != self.ns and p["spec"].get("nodeName") == self.node.name
        ]
        self.workloads.forget({p["metadata"]["uid"] for p in mine})
        for pod in mine:
            uid = pod["metadata"]["uid"]
            if uid in self.workloads.started or uid in self.workloads.refused:
                continue
            status = self.workloads.admit(pod, self.edit_env)
            meta = {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}
            with contextlib.suppress(Exception):  # deleted meanwhile
                api.apply(body, field_manager="kubelet", force=True, subresource="status")

    def stop_all(self) -> None:
        for name in list(self.running):
            self._stop(name)

    def _stop(self, uid: str) -> None:
        running = self.running.pop(uid)
        if running.edit_env is not None:
            self.edit_env = None
        running.stop.set()
        running.thread.join(30)

    def _start(self, pod: Mapping[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        component = labels.get(workloads.COMPONENT_LABEL, "")
        workload_name = labels.get(workloads.APP_LABEL, "")
        self._count += 1
        pod_dir = self.workdir / f"{self._count:03d}-{pod['metadata']['name']}"
        container = next(c for c in pod["spec"]["containers"] if c["name"] not in SIDECARS)
        edit = next((c for c in pod["spec"]["containers"] if c["name"] in SIDECARS), None)
        try:
            env = self._environment(pod, container, pod_dir)
            edit_env = None if edit is None else self._environment(pod, edit, pod_dir, payloads=False)
        except (podspec.PlanError, KeyError, OSError) as exc:
            self.failed[pod["metadata"]["uid"]] = f"cannot start: {exc}"
            return
        probe = Path(env[PROBE]) if PROBE in env else None
        stop = threading.Event()
        run: Runner
        if component == Component.RUNTIME.value:
            run = standins.RuntimeStandIn(
                self.node.k8s.api, self.node.name, self.node.fake.root, probe or pod_dir / "probe"
            ).run
        elif workload_name in AGENTS or component in AGENTS:
            run = AGENTS[workload_name if workload_name in AGENTS else component]({**FAST, **env}, self.node)
        else:
            self.failed[pod["metadata"]["uid"]] = f"no stand-in runs component {component!r}"
            return
        thread = threading.Thread(target=_guarded(run, pod["metadata"]["name"]), args=(stop,), daemon=True)
        thread.start()
        self.running[pod["metadata"]["uid"]] = Running(pod["metadata"]["name"], thread, stop, probe, edit_env)
        if edit_env is not None:
            self.edit_env = edit_env

    def _environment(
        self, pod: Mapping[str, Any], container: Mapping[str, Any], pod_dir: Path, *, payloads: bool = True
    ) -> dict[str, str]:
        stand_ins = process_standins.StandIns(host_root=self.node.fake.root, payloads=self.payloads)
        inits = (pod["spec"].get("initContainers") or []) if payloads else []
        for init in inits:  # the payload init containers: `cp -a /payload/. TARGET/`
            found = _TARGET.search(" ".join(init.get("command") or []))
            if found is None:
                raise podspec.PlanError("StartError", f"init container {init['name']}: not a payload copy")
            target = process_standins.path_map(pod, init, pod_dir, stand_ins).rewrite(found.group(1))
            standins.copy_payload(self.payloads[init["image"]], Path(target))
        facts = podspec.PodFacts(node_name=self.node.name, pod_ip="127.0.0.1", host_ip="127.0.0.1")
        mounts = process_standins.path_map(pod, container, pod_dir, stand_ins)
        (pod_dir / "tmp").mkdir(parents=True, exist_ok=True)
        raw = podspec.environment(container, pod, facts, self._lookup)
        return {k: mounts.rewrite(v) for k, v in raw.items()}

    def _lookup(self, kind: str, name: str, key: str) -> str:
        found = self.node.k8s.objects.get("v1", kind, name, self.ns)
        if found is None or key not in (found.get("data") or {}):
            raise KeyError(key)
        return str(found["data"][key])

    def _report(self, pod: Mapping[str, Any]) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        running = self.running.get(uid)
        ready = running is not None and running.thread.is_alive() and (running.probe is None or running.probe.exists())
        if standins.pod_ready(pod) == ready and (pod.get("status") or {}).get("phase"):
            return
        status = {
            "phase": "Failed" if uid in self.failed else "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {"name": c["name"], "ready": ready, "restartCount": 0} for c in pod["spec"]["containers"]
            ],
        }
        if uid in self.failed:
            status["message"] = self.failed[uid]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.ns}, "status": status}
        with contextlib.suppress(Exception):  # deleted meanwhile: the next sync stops its agent
            self.node.k8s.api.apply(body, field_manager="kubelet", force=True, subresource="status")


PROBE = agent_env.PROBE_FILE
_TARGET = re.compile(r'mkdir -p "([^"]+)"')


def _guarded(run: Runner, pod: str) -> Runner:
    def guarded(stop: threading.Event) -> None:
        try:
            run(stop)
        except Exception:
            log.exception("pod %s: its agent stopped with an error", pod)

    return guarded
