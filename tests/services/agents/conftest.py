"""A node for agent tests: a fake GPU host (metax_hw_fake, the real adapters on a temporary root), the
in-memory cluster with the node registered, a payload directory like the driver image's, a hand-moved clock."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import attrs

from metax_core.node import payload_layout
from metax_hw import hostfiles
from metax_hw_fake import builder, kmods
from metax_hw_fake import host as fake_host
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster

NODE = "gpu-node-1"
NAMESPACE = "metax-operator"
PAYLOAD_VERSION = "2.20.0"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@attrs.define
class Node:
    root: pathlib.Path
    payload: pathlib.Path
    fake: fake_host.FakeHost
    k8s: inmemory.InMemoryCluster
    clock: Clock

    def ports(self, component: str) -> cluster.ClusterPorts:
        return cluster.in_memory(self.k8s, component, NODE)

    @property
    def board(self) -> hostfiles.FileReadinessBoard:
        return hostfiles.FileReadinessBoard(self.root)

    def node(self) -> dict[str, Any]:
        return self.k8s.api.get("v1", "Node", NODE)

    def labels(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("labels") or {})

    def annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})

    def config_map(self, name: str, data: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}
        self.k8s.objects.apply({**body, "data": data}, field_manager="admin", force=True)

    def events(self) -> list[dict[str, Any]]:
        return list(self.k8s.objects.list("events.k8s.io/v1", "Event", "default").items)

    def reasons(self) -> list[str]:
        return sorted(e.get("reason", "") for e in self.events())

    def writes(self) -> int:
        """Every write the API server has committed (its resourceVersion counter)."""
        return int(self.k8s.objects.list("v1", "Node").resource_version)


def write_payload(
    payload: pathlib.Path,
    version: str = PAYLOAD_VERSION,
    *,
    firmware: str | None = None,
    built_for: str | None = None,
    kernels: Sequence[str] = (),
) -> None:
    """The driver image's payload: the flat ``driver/metax.ko`` (``built_for`` another kernel release: the
    fake kernel refuses it) or, with ``kernels``, one ``driver/<release>/metax.ko`` built for each."""
    targets = [(payload_layout.module_relpath(k), k) for k in kernels] or [("driver/metax.ko", built_for)]
    for relpath, kernel in targets:
        kmods.write_module_file(
            payload / relpath,
            "metax",
            version,
            "metax",
            [(0x9999, -1)],
            dict(builder.METAX_PARAMS),
            vermagic=kmods.vermagic(kernel) if kernel else None,
        )
    if firmware is not None:
        for build, virt in (("non-virt", 0), ("virt", 1)):
            target = payload / "firmware" / build / f"mxvbios-{firmware}.bin"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"vbios={firmware}\nvirt={virt}\n")


def make_node(tmp: pathlib.Path, spec: builder.FakeHostBuilder, *, timeout: float = 10.0) -> Node:
    root, payload = tmp / "host", tmp / "payload"
    fake = spec.build(root, timeout=timeout)
    write_payload(payload)
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE, labels={"kubernetes.io/hostname": NODE, "team": "ml"})
    for namespace in (NAMESPACE, "default"):
        if k8s.objects.get("v1", "Namespace", namespace) is None:
            k8s.objects.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, field_manager="t"
            )
    return Node(root=root, payload=payload, fake=fake, k8s=k8s, clock=Clock())
