"""`ProcessNode`: a Node the harness registers itself, kept Ready by a Lease, whose pods run as local processes.

Why a module of its own: this is the kubelet's node half. The node authenticates as ``system:node:<name>``
with a client certificate from the control plane's CA (so the Node authorizer and NodeRestriction limit it as
they limit a kubelet), registers its own Node object (no kwok annotation: kwok leaves it alone), renews its
Lease in ``kube-node-lease`` every 10 s, and watches the pods bound to it (``spec.nodeName``), one
`worker.PodWorker` per pod. Its address is its own /32 on ``lo`` (`address`); its pods share it (host
network). It is tainted ``metax.dev/process-node=true:NoSchedule`` and labelled ``type=process``, so only pods
that ask for it (a toleration and a nodeSelector) land on it. Stopping it (also at interpreter exit) stops every
pod's processes, releases the address and, given admin credentials, deletes the Node.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from metax_core.errors import ClusterError, Conflict, NotFound
from metax_core.ports.cluster import WatchEventType
from metax_dev.controlplane import network, pki, processes
from metax_dev.processnode import address, standins, worker
from metax_k8s import client

log = logging.getLogger(__name__)

LABEL: Final = "type"
LABEL_VALUE: Final = "process"
TAINT_KEY: Final = "metax.dev/process-node"
LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_SECONDS: Final = 40
HEARTBEAT: Final = 10.0
STATUS_EVERY: Final = 60.0


def default_bin_dirs() -> tuple[Path, ...]:
    """The project's virtualenv: where `metax-operator-controller` and friends are installed."""
    return (Path(sys.executable).parent,)


def _micro(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ProcessNode:
    def __init__(
        self,
        *,
        name: str,
        server_url: str,
        ca: Path,
        authority: pki.Pki,
        workdir: Path,
        bin_dirs: Sequence[Path] | None = None,
        labels: Mapping[str, str] | None = None,
        admin: client.HttpApi | None = None,
        capacity: Mapping[str, str] | None = None,
        stand_ins: standins.StandIns | None = None,
    ) -> None:
        self.name = name
        self.server_url = server_url
        self.ca = ca
        self.authority = authority
        self.workdir = workdir
        self.bin_dirs = tuple(bin_dirs) if bin_dirs is not None else default_bin_dirs()
        self.labels = {
            LABEL: LABEL_VALUE,
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            **(labels or {}),
        }
        self.admin = admin
        self.capacity = dict(capacity or {"cpu": "8", "memory": "16Gi", "pods": "30"})
        self.stand_ins = stand_ins
        """What stands in for images and the host when this node stands for a GPU node (docs/processnode.md)."""
        self.address = ""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workers: dict[str, worker.PodWorker] = {}
        self._lock = threading.Lock()
        self._context: worker.NodeContext | None = None
        self._node_uid = ""
        self._registered = ""

    @classmethod
    def for_control_plane(cls, plane: Any, workdir: Path, name: str = "process-node-0", **kwargs: Any) -> ProcessNode:
        """A process node of a started `metax_dev.controlplane.cluster.ControlPlane`."""
        admin = client.HttpApi(client.api_client(plane.kubeconfig_path), user_agent="metax-processnode-admin")
        return cls(
            name=name,
            server_url=plane.server_url,
            ca=plane.ca_path,
            authority=plane.authority,
            workdir=workdir,
            admin=admin,
            **kwargs,
        )

    def __enter__(self) -> ProcessNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def api(self) -> client.HttpApi:
        if self._context is None:
            raise RuntimeError("process node not started")
        return self._context.api

    # -- start ------------------------------------------------------------------------------------------

    def start(self) -> ProcessNode:
        if shutil.which("setpriv") is None:
            raise RuntimeError("the process node needs setpriv (util-linux) to tie containers to their pod worker")
        self.workdir.mkdir(parents=True, exist_ok=True)
        processes.stop_at_exit(self)
        self.address = address.claim()
        pair = self.authority.issue(
            f"{self.name}-client",
            f"system:node:{self.name}",
            organizations=["system:nodes"],
            client=True,
            directory=self.workdir,
        )
        kubeconfig = self.workdir / "node.kubeconfig"
        pki.write_kubeconfig(kubeconfig, self.server_url, self.authority.ca, f"system:node:{self.name}", pair)
        api = client.HttpApi(client.api_client(kubeconfig), user_agent=f"metax-processnode/{self.name}")
        port = urlparse(self.server_url).port or 443
        self._context = worker.NodeContext(
            name=self.name,
            address=self.address,
            api=api,
            http=network.Https(port, self.ca, pair),
            ca=self.ca,
            server_port=port,
            bin_dirs=self.bin_dirs,
            root=self.workdir / "pods",
            stand_ins=self.stand_ins,
        )
        self._register()
        self._renew_lease()
        for target, label in ((self._heartbeat, "heartbeat"), (self._watch, "pod watch")):
            thread = threading.Thread(target=target, name=f"{self.name} {label}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("process node %s up at %s", self.name, self.address)
        return self

    def _node(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": {"taints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
        }

    def _register(self) -> None:
        try:
            created = self.api.create(self._node(), field_manager=worker.FIELD_MANAGER)
        except Conflict:
            created = self.api.get("v1", "Node", self.name)
        self._node_uid = created["metadata"]["uid"]
        self._registered = _micro(dt.datetime.now(dt.UTC))[:19] + "Z"
        self._write_status()

    def _write_status(self) -> None:
        now = _micro(dt.datetime.now(dt.UTC))[:19] + "Z"

        def condition(kind: str, value: bool, reason: str, message: str) -> dict[str, Any]:
            state = "True" if value else "False"
            return {
                "type": kind,
                "status": state,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._registered,
            }

        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name},
            "status": {
                "capacity": self.capacity,
                "allocatable": self.capacity,
                "addresses": [
                    {"type": "InternalIP", "address": self.address},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "metax-processnode",
                    "containerRuntimeVersion": "process://",
                    "kernelVersion": "",
                    "osImage": "",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
                "conditions": [
                    condition("MemoryPressure", False, "KubeletHasSufficientMemory", "no memory pressure"),
                    condition("DiskPressure", False, "KubeletHasNoDiskPressure", "no disk pressure"),
                    condition("PIDPressure", False, "KubeletHasSufficientPID", "no PID pressure"),
                    condition("Ready", True, "KubeletReady", "process node is posting ready status"),
                ],
            },
        }
        self.api.apply(body, field_manager=worker.FIELD_MANAGER, force=True, subresource="status")

    def _renew_lease(self) -> None:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}],
            },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _micro(dt.datetime.now(dt.UTC)),
            },
        }
        self.api.apply(lease, field_manager=worker.FIELD_MANAGER, force=True)

    def _heartbeat(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(HEARTBEAT):
            try:
                self._renew_lease()
                if time.monotonic() - last_status >= STATUS_EVERY:
                    self._write_status()
                    last_status = time.monotonic()
            except ClusterError as exc:
                log.warning("process node %s: heartbeat failed: %s", self.name, exc)

    # -- pods -------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        selector = f"spec.nodeName={self.name}"
        while not self._stop.is_set():
            try:
                listed = self.api.list("v1", "Pod", field_selector=selector)
                keys = set()
                for pod in listed.items:
                    keys.add(self._handle(pod))
                with self._lock:
                    gone = [k for k in self._workers if k not in keys]
                for key in gone:
                    self._forget(key)
                version = listed.resource_version
                while not self._stop.is_set():
                    for event in self.api.watch(
                        "v1", "Pod", field_selector=selector, resource_version=version, timeout_seconds=5
                    ):
                        version = event.object.get("metadata", {}).get("resourceVersion", version)
                        if event.type is WatchEventType.BOOKMARK:
                            continue
                        if event.type is WatchEventType.DELETED:
                            self._forget(self._key(event.object), uid=event.object["metadata"]["uid"])
                        else:
                            self._handle(event.object)
                        if self._stop.is_set():
                            break
            except ClusterError as exc:
                if not self._stop.is_set():
                    log.info("process node %s: pod watch restarts: %s", self.name, exc)
                    self._stop.wait(1.0)

    @staticmethod
    def _key(pod: Mapping[str, Any]) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def _handle(self, pod: Mapping[str, Any]) -> str:
        key = self._key(pod)
        uid = pod["metadata"]["uid"]
        with self._lock:
            existing = self._workers.get(key)
        if existing is not None and existing.uid != uid:
            self._forget(key)
            existing = None
        if existing is not None:
            existing.update(pod)
            return key
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            return key  # finished before this node (re)started: nothing to run
        assert self._context is not None
        started = worker.PodWorker(self._context, pod)
        with self._lock:
            if self._stop.is_set():
                return key
            self._workers[key] = started
        started.start()
        return key

    def _forget(self, key: str, uid: str | None = None) -> None:
        with self._lock:
            found = self._workers.get(key)
            if found is None or (uid is not None and found.uid != uid):
                return
            del self._workers[key]
        found.removed()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the API server shows this Node Ready (and without the not-ready taint the controller adds)."""
        deadline = time.monotonic() + timeout
        while True:
            obj = self.api.get("v1", "Node", self.name)
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in obj.get("status", {}).get("conditions") or []
            )
            taints = {t.get("key") for t in (obj.get("spec") or {}).get("taints") or []}
            if ready and "node.kubernetes.io/not-ready" not in taints:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"process node {self.name} not Ready after {timeout:.0f}s: {obj.get('status')}")
            time.sleep(0.2)

    def worker(self, namespace: str, name: str) -> worker.PodWorker | None:
        with self._lock:
            return self._workers.get(f"{namespace}/{name}")

    def log_path(self, namespace: str, name: str, container: str) -> Path | None:
        found = self.worker(namespace, name)
        return found.log_path(container) if found is not None else None

    # -- stop ------------------------------------------------------------------------------------------

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            w.stop()
        for thread in self._threads:
            thread.join(15)
        if self.admin is not None and self._context is not None:
            with contextlib.suppress(NotFound):
                self.admin.delete("v1", "Node", self.name)
            with contextlib.suppress(NotFound):
                self.admin.delete("coordination.k8s.io/v1", "Lease", self.name, LEASE_NAMESPACE)
        if self.address:
            with contextlib.suppress(address.AddressError):
                address.release(self.address)
        processes.forget_at_exit(self)
        log.info("process node %s stopped", self.name)
