"""The vendor payload images of the driver and maca pods: which images, from which registry, and the init
containers that copy them into the pod (R-DRIVER, R-MACA; docs/configuration.md "Payload images").

Why a module of its own: a payload is the vendor's code that ends up in the host's kernel and SDK directory, so how
its image is named and how confined its copy runs (`pod_security.PAYLOAD_SECURITY`: no token, no capability) is
one place a security review reads (docs/security.md "Tokens only where needed").
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from metax_core.cluster import pod_security
from metax_core.components import Component
from metax_core.spec import model as spec
from metax_core.spec import names
from metax_core.wire import agent_env

PAYLOAD_VOLUME = "payload"
PAYLOAD_SOURCE = "/payload"
"""Where a payload image keeps its files (the payload image contract, docs/configuration.md)."""
PAYLOAD_DIR = "/run/metax-payload"
"""Where the agent finds them: one directory per payload image, ``0``, ``1``, ... in the order listed."""


def payload_reference(image_ref: str, payload_registry: str | None, global_registry: str) -> str:
    """Registry precedence for payload images (docs/configuration.md, "Payload images"): an image that names
    its own registry host is used as is; otherwise the payload's registry, else the global ``registry``,
    else the image as written."""
    first = image_ref.split("/", 1)[0]
    if "/" in image_ref and names.names_registry(first):
        return image_ref
    registry = payload_registry or global_registry
    return f"{registry}/{image_ref}" if registry else image_ref


def payload_images(s: spec.ClusterOperatorSpec, component: Component) -> list[str]:
    """The payload images a component installs from: the driver payload (R-DRIVER) or the MXMACA SDK
    images (R-MACA); none for other components, or for a driver that manages neither driver nor firmware."""
    if component is Component.DRIVER:
        d = s.driver
        wanted = (
            d.deploy_policy is not spec.DeployPolicy.NEVER or d.fw_upgrade_policy is spec.FirmwarePolicy.PREFER_CLOUD
        )
        if not wanted or not d.payload.version:
            return []
        return [payload_reference(f"{d.payload.name}:{d.payload.version}", d.payload.registry, s.registry)]
    if component is Component.MACA:
        return [payload_reference(i, s.maca.payload.registry, s.registry) for i in s.maca.payload.images]
    return []


def add_payloads(
    pod_spec: dict[str, Any],
    agent: dict[str, Any],
    images: Sequence[str],
    pull_policy: str,
    *,
    single: bool = False,
) -> None:
    """One init container per payload image copies its ``/payload`` into a shared emptyDir.

    A ``single``-image payload (the driver's) lands in `PAYLOAD_DIR` itself, which is the agent's
    ``METAX_PAYLOAD_DIR``; several images (maca's) land in ``PAYLOAD_DIR/<n>/`` and the agent also gets
    ``METAX_PAYLOAD_IMAGES``, the references in the same order."""
    if not images:
        return

    def target(i: int) -> str:
        return PAYLOAD_DIR if single else f"{PAYLOAD_DIR}/{i}"

    pod_spec["initContainers"] = [
        {
            "name": f"payload-{i}",
            "image": reference,
            "imagePullPolicy": pull_policy,
            "command": ["/bin/sh", "-c", f'mkdir -p "{target(i)}" && cp -a {PAYLOAD_SOURCE}/. "{target(i)}/"'],
            "volumeMounts": [{"name": PAYLOAD_VOLUME, "mountPath": PAYLOAD_DIR}],
            "securityContext": copy.deepcopy(pod_security.PAYLOAD_SECURITY),
            "resources": copy.deepcopy(pod_security.PAYLOAD_RESOURCES),
        }
        for i, reference in enumerate(images)
    ]
    pod_spec.setdefault("volumes", []).append({"name": PAYLOAD_VOLUME, "emptyDir": {}})
    agent.setdefault("volumeMounts", []).append({"name": PAYLOAD_VOLUME, "mountPath": PAYLOAD_DIR, "readOnly": True})
    agent["env"].append({"name": agent_env.PAYLOAD_DIR, "value": PAYLOAD_DIR})
    if not single:
        agent["env"].append({"name": agent_env.PAYLOAD_IMAGES, "value": ",".join(images)})
