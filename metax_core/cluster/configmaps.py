"""The two ConfigMaps the operator owns: ``driver-config`` (R-VF, R-MODPARAM) and ``metax-vfio-config`` (R-VFIO).

Why a module of its own: they follow opposite rules. ``driver-config`` is the administrator's file: the
operator creates it once, with the documented defaults (no VFs, no module parameters), and never writes it
again, so edits survive upgrades. ``metax-vfio-config`` is rendered from ``vfioManager.vfioConfig`` on every
reconcile and server-side applied, so the spec is its only source. Both are plain manifests; the operator
applies them and `metax-operator render` prints them.

Their data formats are not defined here: each has one owner that renders and parses it, and that both the
operator and the agent reading it call (issue 20): `metax_core.node.driver_config` (read by driver-manager)
and `metax_core.node.vfio_config_map` (read by vfio-manager). This module only wraps them into manifests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.cluster import workloads
from metax_core.components import Component
from metax_core.node import driver_config
from metax_core.node import vfio_config_map as vfio_format
from metax_core.spec import model as spec


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            workloads.MANAGED_BY_LABEL: workloads.MANAGED_BY,
            workloads.PART_OF_LABEL: workloads.PART_OF,
        },
    }


def driver_config_map(namespace: str = spec.NAMESPACE) -> dict[str, Any]:
    """``driver-config`` with the documented defaults: every node keeps its GPUs whole, no module parameters."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(workloads.DRIVER_CONFIG_MAP, namespace),
        "data": driver_config.render(driver_config.DriverConfig()),
    }


def vfio_config_map(s: spec.ClusterOperatorSpec, namespace: str = spec.NAMESPACE) -> dict[str, Any]:
    """``metax-vfio-config`` for ``s`` (rendered whether or not vfio-manager is on: it is cheap and harmless)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(workloads.VFIO_CONFIG_MAP, namespace),
        "data": vfio_format.render(s.vfio_manager.vfio_config),
    }


READERS: Mapping[str, Component] = {
    workloads.DRIVER_CONFIG_MAP: Component.DRIVER,
    workloads.VFIO_CONFIG_MAP: Component.VFIO_MANAGER,
}
"""The component whose agent reads each ConfigMap (``metax-operator render --component`` shows it with it)."""


def manifests(s: spec.ClusterOperatorSpec, namespace: str = spec.NAMESPACE) -> tuple[dict[str, Any], ...]:
    """Both ConfigMaps, in the order the operator applies them (before any workload, which reads them)."""
    return driver_config_map(namespace), vfio_config_map(s, namespace)
