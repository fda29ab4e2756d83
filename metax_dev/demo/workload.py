"""The demo kubelet's part for a user's GPU pod: device allocation, then the container's start edit.

Why a module of its own: this is the path a GPU workload takes on a real node, played with the product's own
code at each step. The kubelet's device manager asks gpu-device for the devices (`Allocator`: in-process
`standins.DeviceManager` → gpu-device's ``allocate``, or gRPC to its plugin on a real-cluster node); the
container's OCI spec gets the allocation's environment as a CDI-capable containerd hands it to the runtime
wrapper; then the container-edit service's ``Editor`` (built from the maca
pod's ``container-edit`` container environment on that node) gathers its inputs from the host and applies the
one pure edit, `metax_core.runtime.container_edit.edit`, which resolves ``METAX_MACA_VERSION`` with
`metax_core.versions.resolve` (what ``metax-operator maca resolve`` runs) and mounts that SDK. Not played: the
in-use record the service writes for a started runc container (there is no runc container here).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from metax_core import versions
from metax_core.node import devices
from metax_core.runtime import container_edit
from services.container_edit import config as edit_config
from services.container_edit import server as edit_server

GPU = devices.Resource.GPU.value


class Allocator(Protocol):
    """The kubelet's device manager as a GPU pod's admission uses it: in-process (`standins.DeviceManager`) or
    over gRPC to gpu-device's plugin on a real-cluster node (`metax_dev.demo.devices.KubeletDevices`)."""

    def allocate(self, owner: str, resource: str, count: int) -> devices.ContainerAllocation:
        """``count`` of ``resource`` for ``owner``'s container; `container_edit.Refusal` when it cannot."""
        ...

    def release(self, owner: str) -> None: ...

    def holdings(self) -> dict[str, list[str]]:
        """Resource → the device IDs pods hold (what the kubelet's PodResources API answers)."""
        ...


@attrs.frozen
class Started:
    devices: tuple[str, ...]
    maca: versions.Version | None
    mounts: tuple[str, ...]


class Workloads:
    """The GPU pods on one node: admitted (devices + start edit) or refused, released when deleted."""

    def __init__(self, manager: Allocator) -> None:
        self.manager = manager
        self.started: dict[str, Started] = {}
        self.refused: dict[str, str] = {}
        self._lock = threading.Lock()

    def admit(self, pod: Mapping[str, Any], edit_env: Mapping[str, str] | None) -> dict[str, Any]:
        """Start ``pod``'s one container; the pod status to write (Running, or Failed with the reason)."""
        uid = pod["metadata"]["uid"]
        container = pod["spec"]["containers"][0]
        count = int(((container.get("resources") or {}).get("limits") or {}).get(GPU, 0))
        try:
            if edit_env is None:
                raise container_edit.Refusal("no container-edit on this node (maca is not running)")
            allocation = self.manager.allocate(uid, GPU, count)
            env = [f"{e['name']}={e.get('value', '')}" for e in container.get("env") or []]
            # A CDI-capable runtime (containerd >= 1.7) injects the CDI devices itself before the runtime wrapper
            # runs, so the spec container-edit sees carries the allocation's environment, not the annotations
            # (the fake host's /dev entries are plain files: no device numbers for the edit to copy).
            config = {"process": {"env": [*env, *(f"{k}={v}" for k, v in allocation.envs.items())]}}
            editor = edit_server.Editor(edit_config.from_env(edit_env))
            edited = container_edit.edit(config, editor.inputs(config))
        except container_edit.Refusal as exc:
            self.manager.release(uid)
            with self._lock:
                self.refused[uid] = exc.message
            return {"phase": "Failed", "reason": "StartError", "message": exc.message}
        mounts = tuple(str(m.get("destination")) for m in edited.config.get("mounts") or [])
        with self._lock:
            self.started[uid] = Started(tuple(allocation.cdi_devices), edited.maca, mounts)
        return {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def forget(self, live: set[str]) -> None:
        """Release the devices of pods that are gone."""
        with self._lock:
            gone = [uid for uid in [*self.started, *self.refused] if uid not in live]
            for uid in gone:
                self.started.pop(uid, None)
                self.refused.pop(uid, None)
        for uid in gone:
            self.manager.release(uid)
