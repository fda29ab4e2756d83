"""The cluster side every node agent needs, as one bundle: objects (ConfigMaps), node metadata, Events.

Why a bundle: production builds the three ports on one authenticated client (in-cluster config, or
$KUBECONFIG when run as a local process next to kwok nodes); tests build them on one
`metax_k8s.inmemory.InMemoryCluster`. Agents take the bundle and never know which.
"""

from __future__ import annotations

from typing import Any, NoReturn

import attrs

from metax_core.errors import ClusterError
from metax_core.ports.cluster import Events, NodeMetadata, Objects
from metax_core.wire import meta


@attrs.frozen
class ClusterPorts:
    objects: Objects
    nodes: NodeMetadata
    events: Events | None


def production(component: str, node_name: str, *, kubeconfig: str | None = None) -> ClusterPorts:
    """The ports over the real API server (in-cluster, or ``kubeconfig``, or $KUBECONFIG); ClusterError when no
    configuration can be loaded."""
    from metax_k8s import client, connect, events, nodes, objects

    try:
        api = client.HttpApi(connect.connect(kubeconfig))  # not the kubernetes package: ~20 MiB less per agent (P8)
    except ClusterError:
        raise
    except Exception as exc:  # the kubernetes client raises its own ConfigException, OSError, ...
        raise ClusterError("configure", "the Kubernetes API client", str(exc)) from exc
    manager = f"metax-{component}"
    return ClusterPorts(
        objects=objects.K8sObjects(api),
        nodes=nodes.K8sNodeMetadata(api, field_manager=manager),
        events=events.K8sEvents(
            api, reporting_controller=meta.reporting_controller(component), reporting_instance=node_name
        ),
    )


class _NoApi:
    """The cluster ports of an agent that runs without a ServiceAccount token (the data-exporter, 000 Table
    1.3.1): any use is a ClusterError saying so, never a silent no-op."""

    def __init__(self, component: str) -> None:
        self.component = component

    def __getattr__(self, name: str) -> Any:
        def refuse(*args: object, **kwargs: object) -> NoReturn:
            raise ClusterError(name, "the Kubernetes API", f"{self.component} runs without API access")

        return refuse


def no_api(component: str, node_name: str) -> ClusterPorts:
    """Ports for an agent that never talks to the API server (its watches must be empty)."""
    unused: Any = _NoApi(component)
    return ClusterPorts(objects=unused, nodes=unused, events=None)


def in_memory(cluster: Any, component: str, node_name: str) -> ClusterPorts:
    """The ports on a `metax_k8s.inmemory.InMemoryCluster` (tests, the demo)."""
    return ClusterPorts(
        objects=cluster.objects,
        nodes=cluster.node_metadata,
        events=cluster.events(reporting_controller=meta.reporting_controller(component), reporting_instance=node_name),
    )


def config_map_data(objects: Objects, name: str, namespace: str) -> dict[str, Any] | None:
    """``data`` of a ConfigMap (None when it does not exist); ClusterError when unreadable."""
    found = objects.get("v1", "ConfigMap", name, namespace)
    if found is None:
        return None
    return dict(found.get("data") or {})
