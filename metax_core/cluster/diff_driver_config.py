"""``metax-operator diff --driver-config``: what an edit of ``driver-config`` would do (R-DIFF, R-VF, R-MODPARAM).

Why it exists: VF counts and module parameters are not in the spec but in the administrator's ConfigMap
(docs/driver-config.md); an edit of it recreates the gpu-device pod of each node whose VF count changes and
makes driver-manager rewrite VFs or reload the kernel module. This is the pure prediction, from the same
functions the real actors call: each node's VF count and parameters as driver-manager resolves them
(`driver_config.for_node`), the pods the operator recreates (`vf_restarts.decide`, R-VF), and whether
driver-manager reloads the module (`driver_config.module_params_decision`, with the live ConfigMap's
parameters as the loaded ones) or leaves the kernel alone (`policy.choose_driver`: deployPolicy Never). The
ConfigMap's own change is `diff.unified` of the manifests the caller passes (the live object and what the API
server would store, from its dry run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import components
from metax_core.cluster import diff, vf_restarts
from metax_core.errors import FieldError, InvalidSpec, MetaxError
from metax_core.inventory import METAX_MODULE, ModuleState
from metax_core.node import driver_config, policy
from metax_core.spec import model as spec

GPU_DEVICE_WORKLOAD = components.BY_COMPONENT[components.Component.GPU_DEVICE].workloads[0].name
DATA = "data"
"""The ConfigMap's field the errors are under (as the webhook names them, `metax_k8s.admission`)."""


@attrs.frozen
class NodeChange:
    """One node whose driver-config changes: its VF count and module parameters before and after (None: the
    same), and what its driver-manager then does."""

    node: str
    vfs: tuple[int, int] | None
    params: tuple[Mapping[str, str], Mapping[str, str]] | None
    driver_manager: str


@attrs.frozen
class Prediction:
    refused: tuple[FieldError, ...] = ()
    objects: tuple[diff.ObjectChange, ...] = ()
    restarts: tuple[diff.Restart, ...] = ()
    nodes: tuple[NodeChange, ...] = ()
    unknown_nodes: tuple[str, ...] = ()
    """Nodes the new ConfigMap names that the cluster does not have (a typo changes no node)."""

    @property
    def changes(self) -> bool:
        return bool(self.objects)


@attrs.frozen
class Cluster:
    """What the prediction reads from the live cluster."""

    nodes: Sequence[str]
    recorded: Mapping[str, int] = attrs.field(factory=dict)
    """``status.vfNums`` of cluster-operator: the count each gpu-device pod was started with."""
    gpu_device_pods: Sequence[vf_restarts.GpuDevicePod] = ()
    driver_nodes: Sequence[str] = ()
    """Nodes running a driver-manager pod."""
    spec: spec.ClusterOperatorSpec | None = None
    """The live spec (None: no valid cluster-operator: no component runs)."""


def parse(data: Mapping[str, object] | None) -> driver_config.DriverConfig:
    """The new ConfigMap's data, or InvalidSpec with every error under ``data.<key>``."""
    if data is not None and not isinstance(data, Mapping):
        raise InvalidSpec([FieldError(DATA, "must be a mapping of keys to text")])
    errors = [
        FieldError(f"{DATA}.{key}", "must be text (a ConfigMap value is a string: write the YAML in a '|' block)")
        for key, value in (data or {}).items()
        if value is not None and not isinstance(value, str)
    ]
    try:
        config = driver_config.parse(data)
    except InvalidSpec as exc:
        errors += [FieldError(f"{DATA}.{e.path}" if e.path else DATA, e.message) for e in exc.errors]
    if errors:
        raise InvalidSpec(errors)
    return config


def predict(
    live: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    cluster: Cluster,
) -> Prediction:
    """What replacing the ``driver-config`` manifest ``live`` (None: there is none) with ``new`` (what the API
    server would store) does. A live ConfigMap that does not parse counts as "no VFs, no parameters" for the old
    values shown (driver-manager keeps the last valid one it read, which diff cannot see)."""
    try:
        after = parse(new.get(DATA))
    except InvalidSpec as exc:
        return Prediction(refused=tuple(exc.errors))
    before = vf_restarts.config_or_empty((live or {}).get(DATA))
    name = str(new["metadata"]["name"])
    objects: tuple[diff.ObjectChange, ...] = ()
    if live != new:
        action = diff.Action.CREATE if live is None else diff.Action.UPDATE
        text = diff.unified("ConfigMap", name, live, new)
        objects = (diff.ObjectChange("v1", "ConfigMap", name, new["metadata"].get("namespace"), action, text),)
    deployed = cluster.spec is not None and components.Component.GPU_DEVICE in _deployed(cluster.spec)
    restarts = tuple(
        diff.Restart(
            GPU_DEVICE_WORKLOAD,
            diff.Action.UPDATE,
            (r.node,),
            f"VF count {r.old} → {r.new} (R-VF): the operator deletes gpu-device pod {r.pod}, its DaemonSet starts "
            "a new one that advertises the new split",
        )
        for r in (vf_restarts.decide(after, cluster.recorded, cluster.gpu_device_pods).recreate if deployed else ())
    )
    nodes = tuple(n for node in sorted(set(cluster.nodes)) if (n := _node(node, before, after, cluster)) is not None)
    named = {*after.node_vfnums, *after.node_module_params}
    return Prediction((), objects, restarts, nodes, tuple(sorted(named - set(cluster.nodes))))


def _deployed(s: spec.ClusterOperatorSpec) -> frozenset[components.Component]:
    return frozenset(components.plan(components.enabled(s)).deploy)


def _node(
    node: str, before: driver_config.DriverConfig, after: driver_config.DriverConfig, cluster: Cluster
) -> NodeChange | None:
    old, new = driver_config.for_node(before, node), driver_config.for_node(after, node)
    vfs = (old.vfnum, new.vfnum) if old.vfnum != new.vfnum else None
    params = (old.module_params, new.module_params) if old.module_params != new.module_params else None
    if vfs is None and params is None:
        return None
    return NodeChange(node, vfs, params, _driver_manager(node, old, new, cluster))


def _driver_manager(
    node: str, old: driver_config.NodeDriverConfig, new: driver_config.NodeDriverConfig, cluster: Cluster
) -> str:
    """What driver-manager does on ``node`` (services.driver_manager.agent: reload first, then the VFs)."""
    if cluster.spec is None or components.Component.DRIVER not in _deployed(cluster.spec):
        return "no driver-manager is deployed: nothing is applied"
    if node not in cluster.driver_nodes:
        return "no driver-manager runs on this node: nothing is applied until one does"
    try:
        choice = policy.choose_driver(cluster.spec.driver.deploy_policy, None, cluster.spec.driver.payload.version)
    except MetaxError:
        choice = None
    if choice is not None and choice.source is policy.DriverSource.UNMANAGED:
        return f"{choice.reason}: driver-manager leaves the kernel alone, the VF count and parameters are not applied"
    steps = []
    loaded = ModuleState(METAX_MODULE, None, old.module_params)
    decision = driver_config.module_params_decision(new.module_params, loaded, old.module_params)
    if decision.action is driver_config.ModuleAction.RELOAD:
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(new.module_params.items())) or "the driver's defaults"
        steps.append(
            f"reloads metax with {wanted} (parameters are read at load time; changed: {', '.join(decision.changed)}); "
            "while processes hold the GPUs the unload is refused: the running driver stays, retried with back-off"
        )
    if old.vfnum != new.vfnum:
        if new.vfnum == 0:
            steps.append("removes the VFs (sriov_numvfs 0 on every GPU)")
        else:
            steps.append(
                f"sets {new.vfnum} VF(s) per GPU (sriov_numvfs{', through 0' if old.vfnum else ''}); if a GPU "
                "cannot take that many, no GPU of the node is changed and the driver is reported not ready"
            )
    return "driver-manager " + "; then ".join(steps)
