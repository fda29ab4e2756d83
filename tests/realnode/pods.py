"""Pods for the real-node tests: busybox pods pinned to a node, and waiting for what they do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from metax_dev.productnode import helm_release, workloads

busybox_pod = workloads.busybox_pod
scheduled_pod = workloads.scheduled_pod


def wait(
    predicate: Callable[[], Any],
    what: str,
    *,
    timeout: float = 90.0,
    interval: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll until ``predicate()`` is truthy and return it; fail with ``what`` (and ``explain()``) on timeout."""
    return helm_release.poll(predicate, what, timeout=timeout, interval=interval, explain=explain, error=AssertionError)


def describe(core: client.CoreV1Api, namespace: str) -> str:
    """The namespace's pods (phase, container states) and events, for a failure message."""
    lines = []
    for pod in core.list_namespaced_pod(namespace).items:
        states = [str(c.state) for c in pod.status.container_statuses or []]
        lines.append(f"pod {pod.metadata.name}: {pod.status.phase} {states}")
    lines += [f"event {e.reason}: {e.message}" for e in core.list_namespaced_event(namespace).items]
    return "\n".join(lines)


def wait_running(core: client.CoreV1Api, namespace: str, name: str) -> None:
    wait(
        lambda: phase(core, namespace, name) == "Running",
        f"pod {namespace}/{name} Running",
        explain=lambda: describe(core, namespace),
    )


def phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)


def logs(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod_log(name, namespace))


def wait_logs(core: client.CoreV1Api, namespace: str, name: str, marker: str) -> str:
    """The pod's log once it contains ``marker`` (the pod's script prints it when done)."""

    def ready() -> str:
        if phase(core, namespace, name) not in ("Running", "Succeeded"):
            return ""
        text = logs(core, namespace, name)
        return text if marker in text else ""

    result: str = wait(ready, f"pod {namespace}/{name} to log {marker!r}", explain=lambda: describe(core, namespace))
    return result
