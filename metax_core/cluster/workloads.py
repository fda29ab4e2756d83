"""The Kubernetes objects the operator applies for a spec: one DaemonSet/Deployment per workload (+ Services).

Pure: it returns plain manifests (mappings) that the operator server-side-applies and `metax-operator render`
prints. Each workload gets exactly the privileges of 000 Table 1.3.1 and only the host paths of §1.3.2
(R-SECURITY), its merged pod template (R-MERGE), and the settings its agent reads from the environment.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import components
from metax_core.cluster import (
    container_env,
    dra_objects,
    host_paths,
    image_refs,
    merge,
    network_policies,
    payloads,
    pod_security,
    rbac,
    supporting,
)
from metax_core.cluster.render_settings import RenderSettings
from metax_core.components import Component, Workload, WorkloadKind
from metax_core.metrics import names as metric_names
from metax_core.node import driver_config, vfio_config_map
from metax_core.node import labels as node_labels
from metax_core.spec import model as spec
from metax_core.spec import quantity
from metax_core.topology import extender
from metax_core.wire import agent_env, host, meta

# The names other processes read are defined by their owners (issue 20); these are the same objects.
APP_LABEL = meta.APP_LABEL
MANAGED_BY_LABEL = meta.MANAGED_BY_LABEL
PART_OF_LABEL = meta.PART_OF_LABEL
COMPONENT_LABEL = meta.COMPONENT_LABEL
MANAGED_BY = meta.MANAGED_BY
PART_OF = meta.PART_OF
GPU_NODE_LABEL = node_labels.GPU_INSTALLED
"""gpu-label writes it (`metax_core.node.labels`); the GPU components' DaemonSets select on it."""
EXPORTER_PORT = metric_names.EXPORTER_PORT
DRIVER_CONFIG_MAP = driver_config.CONFIGMAP_NAME
VFIO_CONFIG_MAP = vfio_config_map.NAME

_CONTROL_PLANE_TOLERATIONS = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
]


WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment"})
"""The kinds that start pods: applied after every component's other objects (`in_apply_order`)."""


def in_apply_order(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``objects`` (rendered in deploy order) with every workload moved after every other object, each group
    still in deploy order.

    Why: the first DaemonSet makes the API server busy at once (its controller creates a pod per node, the
    scheduler binds them, the nodes report them), and every request after it waits its turn. Applied component
    by component, a first install's ~50 accounts, roles, services and config objects waited behind the first
    components' pods, so the last DaemonSets came 24 s after the first at 500 nodes (issue 26, P1). Applied
    first, they go through a quiet server; a workload still comes after its own ServiceAccount and roles."""
    return [o for o in objects if o["kind"] not in WORKLOAD_KINDS] + [o for o in objects if o["kind"] in WORKLOAD_KINDS]


@attrs.frozen
class Rendered:
    objects: tuple[Mapping[str, Any], ...]
    """Each component's ServiceAccounts and RBAC, then its workloads (and the exporter Service), in deploy order."""
    plan: components.DeployPlan


def image(s: spec.ClusterOperatorSpec, workload: Workload, settings: RenderSettings) -> str:
    return image_refs.reference(s.registry, workload.name, settings.version, settings.image_digests.get(workload.name))


def default_pod_spec(workload: Workload) -> dict[str, Any]:
    """The workload's own defaults for the managed fields (before the administrator's overrides).

    Node agents (DaemonSets) run on MetaX GPU nodes only, except gpu-discovery, which runs everywhere to find
    them (`components.Workload.everywhere`); every DaemonSet tolerates control-plane taints (a field report against
    MetaX's operator). Deployments run anywhere the scheduler likes.
    """
    if workload.kind is WorkloadKind.DEPLOYMENT:
        return {}
    pod: dict[str, Any] = {"tolerations": copy.deepcopy(_CONTROL_PLANE_TOLERATIONS)}
    if not workload.everywhere:
        pod["nodeSelector"] = {GPU_NODE_LABEL: node_labels.TRUE}
    return pod


def _env(
    s: spec.ClusterOperatorSpec, component: Component, workload: Workload, deployed: Sequence[Component]
) -> list[dict[str, Any]]:
    """The container's env (`agent_env`, the contract each agent's settings class reads)."""
    required = components.requirements(component, deployed)
    declared = declared_probe(component, workload)
    return container_env.render(
        s,
        component,
        log_level=components.component_spec(s, component).log.level.value,
        host_root=host_paths.HOST_ROOT_IN_CONTAINER,
        required=",".join(components.BY_COMPONENT[c].signal for c in required),
        probe_file=None if declared is None else declared.file,
    )


PROBE_FILE = components.AGENT_PROBE.file
"""The readiness probe file a node agent keeps exactly while it works on its node (services._agent.probe)."""


def declared_probe(component: Component, workload: Workload) -> components.ReadinessProbe | None:
    """The probe a component declares (`components.ComponentInfo.probe`), for its node agents' pods only."""
    if workload.kind is not WorkloadKind.DAEMON_SET:
        return None
    return components.BY_COMPONENT[component].probe


def readiness_probe(declared: components.ReadinessProbe) -> dict[str, Any]:
    """The container's readinessProbe for a declared `components.ReadinessProbe` (R-READY)."""
    return {
        "exec": {"command": ["test", "-f", declared.file]},
        "periodSeconds": declared.period_seconds,
        "failureThreshold": declared.failure_threshold,
    }


def default_resources(workload: Workload) -> spec.Resources:
    """A workload's measured defaults (`components.Workload.memory_mib`): 10m CPU requested and no CPU limit (a CPU
    limit throttles a device plugin's answers and health checks), a memory request and limit."""
    request, limit = workload.memory_mib
    return spec.Resources(
        spec.ResourceList(quantity.cpu(10), quantity.memory(request)), spec.ResourceList(memory=quantity.memory(limit))
    )


def container_resources(s: spec.ClusterOperatorSpec, component: Component, workload: Workload) -> dict[str, Any]:
    """The agent container's requests and limits: the component's ``resources`` over the workload's defaults."""
    chosen = components.component_spec(s, component).resources
    defaults = default_resources(workload)
    return (chosen.over(defaults) if chosen is not None else defaults).manifest()


def _labels(component: Component, workload: Workload) -> dict[str, str]:
    return meta.object_labels(workload.name, component.value)


def workload_manifest(
    s: spec.ClusterOperatorSpec,
    component: Component,
    workload: Workload,
    deployed: Sequence[Component],
    settings: RenderSettings,
) -> dict[str, Any]:
    section = components.component_spec(s, component)
    labels = _labels(component, workload)
    volumes, mounts = host_paths.volumes(workload, settings.host_path_prefix)
    container: dict[str, Any] = {
        "name": workload.name.removeprefix("metax-"),
        "image": image(s, workload, settings),
        "imagePullPolicy": settings.image_pull_policy,
        "env": _env(s, component, workload, deployed),
        "securityContext": pod_security.container_security(workload),
        "resources": container_resources(s, component, workload),
    }
    if mounts:
        container["volumeMounts"] = mounts
    declared = declared_probe(component, workload)
    if declared is not None:
        container["readinessProbe"] = readiness_probe(declared)
    if component is Component.EXPORTER:
        container["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT}]
    if component is Component.GPU_SCHEDULER:
        container["ports"] = [{"name": "extender", "containerPort": extender.PORT}]
        container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": "extender"}, "periodSeconds": 5}
    pod_spec: dict[str, Any] = merge.pod_spec_for(s, section.pod_template_spec, default_pod_spec(workload))
    pod_spec = dra_objects.placed(s, component, pod_spec, deployed)  # after the merge: ANDed with every term
    pod_spec["containers"] = [container, *_sidecars(component, container)]
    pod_spec["automountServiceAccountToken"] = False  # the token only where the API is called (pod_security)
    if workload.service_account is not None:
        pod_spec["serviceAccountName"] = workload.service_account
        volumes.append(pod_security.token_volume())
        container.setdefault("volumeMounts", []).append(pod_security.token_mount())
    for i, c in enumerate(pod_spec["containers"]):  # each its own /tmp under its read-only root
        scratch = pod_security.SCRATCH_VOLUME if i == 0 else f"{pod_security.SCRATCH_VOLUME}-{c['name']}"
        volumes.append(pod_security.scratch_volume(scratch))
        c.setdefault("volumeMounts", []).append(pod_security.scratch_mount(scratch))
    if workload.host_pid:
        pod_spec["hostPID"] = True
    if volumes:
        pod_spec["volumes"] = volumes
    if workload.kind is WorkloadKind.DAEMON_SET:
        pod_spec["priorityClassName"] = "system-node-critical"
    pod_context = pod_security.pod_security_context(workload)
    if pod_context is not None:
        pod_spec["securityContext"] = pod_context
    if s.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in s.image_pull_secrets]
    payloads.add_payloads(
        pod_spec,
        container,
        payloads.payload_images(s, component),
        settings.image_pull_policy,
        single=component is Component.DRIVER,
    )
    body: dict[str, Any] = {
        "selector": {"matchLabels": {APP_LABEL: workload.name}},
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if workload.kind is WorkloadKind.DAEMON_SET:
        # The driver is replaced node by node by the rollout engine (R-ROLLOUT), never by the DaemonSet itself.
        if component is Component.DRIVER:
            body["updateStrategy"] = {"type": "OnDelete"}
        else:  # R-UPGRADE: a new operator release reaches the agents node by node
            body["updateStrategy"] = {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": int_or_percent(s.agent_update.max_unavailable)},
            }
    else:
        body["replicas"] = 1
    return {
        "apiVersion": "apps/v1",
        "kind": workload.kind.value,
        "metadata": {"name": workload.name, "namespace": settings.namespace, "labels": labels},
        "spec": body,
    }


def int_or_percent(value: spec.IntOrPercent) -> int | str:
    """A Kubernetes int-or-string: ``3`` or ``"25%"``."""
    return str(value) if value.percent else value.value


EDIT_SERVICE_CONTAINER = "container-edit"
EDIT_SERVICE_COMMAND = "metax-container-edit"
"""The container-edit service (R-MACA): a second container of maca's pod, from the same image, because it reads
what maca installs (the SDK versions) and writes what maca's GC reads (the in-use records)."""
_EDIT_SERVICE_MOUNTS = {host.RUN_DIR: False, host.STATE_DIR: True, host.DEV: True, host.CDI_DIR: True}


def _sidecars(component: Component, agent: Mapping[str, Any]) -> list[dict[str, Any]]:
    if component is not Component.MACA:
        return []
    keep = {agent_env.HOST_ROOT, agent_env.LOG_LEVEL, agent_env.PROBE_FILE}
    sidecar: dict[str, Any] = {
        "name": EDIT_SERVICE_CONTAINER,
        "image": agent["image"],
        "imagePullPolicy": agent["imagePullPolicy"],
        "command": [EDIT_SERVICE_COMMAND],
        "env": [e for e in agent["env"] if e["name"] in keep],
        "securityContext": agent["securityContext"],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [
            {**m, "readOnly": _EDIT_SERVICE_MOUNTS[m["mountPath"].removeprefix(host_paths.HOST_ROOT_IN_CONTAINER)]}
            for m in agent.get("volumeMounts", ())
            if m["mountPath"].removeprefix(host_paths.HOST_ROOT_IN_CONTAINER) in _EDIT_SERVICE_MOUNTS
        ],
    }
    if "readinessProbe" in agent:  # the same file probe, in its own container's /tmp: present while it listens
        sidecar["readinessProbe"] = agent["readinessProbe"]
    return [sidecar]


_DEFAULT_SETTINGS = RenderSettings()


def render(s: spec.ClusterOperatorSpec, settings: RenderSettings = _DEFAULT_SETTINGS) -> Rendered:
    """Every object of every deployable component, in deploy order; blocked ones are in ``plan``."""
    deploy_plan = components.plan(components.enabled(s))
    objects: list[Mapping[str, Any]] = []
    for component in deploy_plan.deploy:
        objects.extend(rbac.objects(component, settings.namespace))  # accounts and roles before their workloads
        for workload in components.BY_COMPONENT[component].workloads:
            objects.append(workload_manifest(s, component, workload, deploy_plan.deploy, settings))
        for workload in components.BY_COMPONENT[component].workloads:
            labels = _labels(component, workload)
            objects.extend(network_policies.objects(s, component, workload.name, settings.namespace, labels))
        if component is Component.EXPORTER:
            objects.append(supporting.exporter_service(s, settings))
            if settings.service_monitor and s.exporter.service.type is not spec.ServiceType.EXTERNAL_NAME:
                objects.append(supporting.exporter_service_monitor(s, settings))
        objects.extend(supporting.cluster_objects(component))
        if component is Component.GPU_SCHEDULER:
            objects.append(supporting.scheduler_service(settings))
        if component is Component.TOPO:
            objects.append(supporting.topology_view(settings))
    return Rendered(objects=tuple(objects), plan=deploy_plan)


def driver_daemonset_index(objects: Sequence[Mapping[str, Any]]) -> int | None:
    """Where the driver's DaemonSet is among rendered objects (None: the driver is not deployed)."""
    return next(
        (
            i
            for i, o in enumerate(objects)
            if o["kind"] == "DaemonSet" and o["metadata"]["name"] == components.DRIVER_DAEMONSET
        ),
        None,
    )
