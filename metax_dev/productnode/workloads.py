"""The users' workloads on the product's real node: busybox pods asking for MetaX GPUs (by the device plugin's
extended resource or by a DRA claim), whose script prints the device nodes and SDK they see, and reading that
back (shared by the end-to-end test, the real-node demo and the real-node tests' helpers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.dra import DRIVER
from metax_dev.realnode import images

#: A pod script fragment: one ``NODE <path> <type> <major>:<minor>`` line per device node it sees.
LIST_DEVICES = 'for f in /dev/dri/* /dev/vfio/* /dev/mxcd; do [ -e "$f" ] && stat -c \'NODE %n %F %t:%T\' "$f"; done; '
#: A pod script fragment: the devices and SDK version the runtime gave the container, one ``NAME=value`` line each.
PRINT_SDK = 'echo "VISIBLE=$METAX_VISIBLE_DEVICES"; echo "RESOLVED=$METAX_MACA_RESOLVED"; maca-version; '
DONE = "DONE"
"""What a workload's script prints once it printed the rest (then it sleeps until deleted)."""


def busybox_pod(name: str, node: str, script: str, *, resources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod running ``script`` in the node's busybox image (never pulled), bound to ``node``."""
    container: dict[str, Any] = {
        "name": "main",
        "image": images.BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }
    if resources:
        container["resources"] = {"limits": dict(resources)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        },
    }


def scheduled_pod(name: str, node: str, script: str, resources: Mapping[str, str]) -> dict[str, Any]:
    """Like :func:`busybox_pod`, but placed by the scheduler (node selector), so that it can stay Pending."""
    pod = busybox_pod(name, node, script, resources=resources)
    del pod["spec"]["nodeName"]
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def claim_template(name: str, count: int) -> dict[str, Any]:
    """A ResourceClaimTemplate for ``count`` MetaX GPUs of the DRA driver's DeviceClass."""
    request = {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def claimed_pod(name: str, node: str, script: str, template: str) -> dict[str, Any]:
    """A scheduled pod whose one container uses the claim made from ``template``."""
    pod = scheduled_pod(name, node, script, {})
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return pod


def device_lines(text: str) -> dict[str, str]:
    """``NODE <path> <type> <major>:<minor>`` lines printed by the pods' scripts: path -> the rest."""
    seen = {}
    for line in text.splitlines():
        if line.startswith("NODE "):
            _, path, rest = line.split(" ", 2)
            seen[path] = rest
    return seen


def printed(text: str, name: str) -> str | None:
    """The value of the first ``name=value`` line in ``text`` (None: not printed)."""
    return next((line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{name}=")), None)
