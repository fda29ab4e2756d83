"""The labels, annotations and finalizer the operator puts on what it owns, and the annotation an
administrator (or ``metax-operator rollout confirm``) puts on cluster-operator.

Why a module of its own: each of these is written by one process and read by another (the operator and
the CLI, the operator and itself after a restart, ``helm uninstall`` and the finalizer), and they were
spelled in several places before (issue 20). docs/labels.md lists them for administrators.
"""

from __future__ import annotations

PREFIX = "metax-tech.com/"

# -- labels on every object the operator (or the chart) creates --------------------------------------------
APP_LABEL = "app.kubernetes.io/name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY = "metax-operator"
"""``managed-by`` value: the operator applies and prunes only objects carrying it."""
PRODUCT = "metax-gpu-operator"
"""The product's name: the Python distribution's (``metax-operator --version`` reads it) and ``part-of``'s value."""
PART_OF = PRODUCT
OPERATOR_FIELD_MANAGER = "metax-operator"
"""The field manager the operator applies its objects with (server-side apply; ``metax-operator diff`` dry-runs
as it, so a field the operator would drop shows as dropped)."""
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
"""Selects every object the operator applies (its informers and its cleanup list with it)."""
PART_OF_SELECTOR = f"{PART_OF_LABEL}={PART_OF}"
"""Selects everything of the product, the components' pods included (the operator's pod informer)."""
COMPONENT_LABEL = PREFIX + "component"
"""Which component (the spec's key, e.g. ``gpuDevice``) a workload, its pods or its RBAC belong to."""

# -- annotations on objects the operator owns ---------------------------------------------------------------
DESIRED_HASH = PREFIX + "desired-hash"
"""The hash of the manifest the operator last applied (skips unchanged applies)."""
DRIVER_REVISION = PREFIX + "driver-revision"
"""On the driver DaemonSet's pod template and so on each driver pod: which template revision it runs."""
CRD_RELEASE = PREFIX + "release"
"""On the ClusterOperator CRD: the operator release whose schema it serves (the operator applies its own CRD at
start and never a CRD older than the one on the cluster, `metax_core.cluster.crd_policy`, R-UPGRADE)."""
DRIVER_AGENT = PREFIX + "driver-agent"
"""On the driver DaemonSet's pod template and so on each driver pod: which driver-manager image it runs (a hash of
the containers' images, which the revision leaves out: a new operator release alone is no new driver, R-UPGRADE)."""
DRIVER_SPEC = PREFIX + "driver-spec"
"""On the driver DaemonSet: the ``spec.driver`` (JSON) it was rendered from (rollback reads it back)."""

# -- on nodes the operator cordons ---------------------------------------------------------------------------
ROLLOUT_CORDON = PREFIX + "rollout-cordon"
"""On a node the driver rollout cordoned to drain it (upgradePolicy.drain): when. Only a node carrying it is
uncordoned by the operator, so a node cordoned by someone else stays cordoned after the rollout (issue 41)."""

# -- on cluster-operator ------------------------------------------------------------------------------------
ROLLOUT_CONFIRM = PREFIX + "rollout-confirm"
"""Its value, a waiting step's ``confirmToken``, confirms that step (R-ROLLOUT, docs/rollout.md)."""
CLEANUP_FINALIZER = PREFIX + "cleanup"
"""The operator's finalizer: deleting cluster-operator removes what the operator created first."""

# -- the ConfigMaps the operator creates in its namespace and others read ------------------------------------
DRIVER_CONFIG_MAP = "driver-config"
"""Read by driver-manager (`metax_core.node.driver_config` owns its data)."""
VFIO_CONFIG_MAP = "metax-vfio-config"
"""Read by vfio-manager (`metax_core.node.vfio_config_map` owns its data)."""
TOPOLOGY_VIEW_MAP = "metax-topology"
"""Filled by topo-master, read by gpu-scheduler (`metax_core.topology.cluster_view` owns its data)."""


def object_labels(name: str, component: str | None = None) -> dict[str, str]:
    """The labels of an object the operator owns: its name, who manages it, the product, and (when it belongs to
    one) its component's key. The operator prunes by ``managed-by``; the pods and RBAC of a component are found by
    `COMPONENT_LABEL`."""
    labels = {APP_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY, PART_OF_LABEL: PART_OF}
    if component is not None:
        labels[COMPONENT_LABEL] = component
    return labels


def reporting_controller(component: str) -> str:
    """The ``reportingController`` of the Events a component's agent writes: ``metax-tech.com/<component>``."""
    return PREFIX + component
