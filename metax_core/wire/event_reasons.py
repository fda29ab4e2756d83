"""Every Kubernetes Event reason the product emits, named once (issue 20).

Why a module of its own: Event reasons are an interface. Administrators filter on them
(``kubectl get events --field-selector reason=HostDriverInUse``), alerts and tests match them, docs list them
(docs/operator.md, docs/agents.md), and ``metax-operator doctor`` reads them back; a reason spelled in two places
drifts. They are plain strings (what the Events API carries), grouped by who emits them on what.
"""

from __future__ import annotations

from typing import Final

# -- the operator, on cluster-operator -----------------------------------------------------------------------
INVALID_SPEC: Final = "InvalidSpec"
"""The spec was refused (every field path in the message); nothing was changed."""
CLEANED_UP: Final = "CleanedUp"
"""cluster-operator is being deleted and everything the operator created is gone."""
CONFIRMATION_IGNORED: Final = "ConfirmationIgnored"
"""The rollout-confirm annotation names another step or an older rollout (R-ROLLOUT)."""
DRIVER_ROLLOUT_PREFIX: Final = "DriverRollout"
"""``DriverRollout<StepState>`` (`driver_rollout`): the rollout's step moved; the message says what to do."""
DRIVER_POD_DELETED: Final = "DriverPodDeleted"
"""On a driver pod the rollout deleted so its node gets the new (or previous) driver."""
CRD_UPGRADED: Final = "CRDUpgraded"
"""The operator applied its own release's ClusterOperator CRD at start (R-UPGRADE, `metax_core.cluster.crd_policy`)."""
CRD_OUTDATED: Final = "CRDOutdated"
"""The CRD serves an older release's schema and could not be brought up to date: nothing is reconciled."""
ROLLOUT_DRAIN_EVICTED: Final = "RolloutDrainEvicted"
"""On a Node the driver rollout drains (upgradePolicy.drain): which GPU pods it evicted, and whether it cordoned it."""
ROLLOUT_DRAIN_BLOCKED: Final = "RolloutDrainBlocked"
"""On a Node being drained: what keeps its GPU workloads there (pods the drain may not evict, budgets)."""
ROLLOUT_UNCORDONED: Final = "RolloutUncordoned"
"""On a Node the driver rollout cordoned and gives back (its driver is done, the drain timed out, or a pause)."""
VF_COUNT_CHANGED: Final = "VfCountChanged"
"""On a gpu-device pod recreated because its node's VF count changed (R-VF)."""
UNINSTALL_INCOMPLETE: Final = "UninstallIncomplete"
"""cluster-operator is being deleted and the bounded wait for the nodes' undo answers ended with nodes that did not
answer (named in the message); also the Uninstalling condition's reason then (`metax_core.node.uninstall`)."""

# -- the operator's applier, on the objects it owns -------------------------------------------------------------
CREATED: Final = "Created"
APPLIED: Final = "Applied"
PRUNED: Final = "Pruned"
REFUSED: Final = "Refused"
"""An object of the same name exists and is not the operator's: it is left alone."""

# -- driver-manager, on its Node ------------------------------------------------------------------------------
DRIVER_READY: Final = "DriverReady"
DRIVER_LOAD_FAILED: Final = "DriverLoadFailed"
PREVIOUS_DRIVER_RESTORED: Final = "PreviousDriverRestored"
"""The new driver did not load after the old one was unloaded; the old one is back."""
DRIVER_RESTORE_FAILED: Final = "DriverRestoreFailed"
"""Neither the new driver nor the previous one loads: the node has no driver."""
HOST_DRIVER_IN_USE: Final = "HostDriverInUse"
"""The loaded driver cannot be unloaded (processes use the GPUs, or it is built in)."""
KERNEL_NOT_COVERED: Final = "KernelNotCovered"
"""The driver payload has no module for the running kernel (after a kernel update): nothing is loaded or
unloaded, the driver is not ready; the message names the running kernel and the kernels the payload covers."""
INVALID_DRIVER_CONFIG: Final = "InvalidDriverConfig"
VF_COUNT_SET: Final = "VfCountSet"
VF_COUNT_REFUSED: Final = "VfCountRefused"
FIRMWARE_UPGRADE_REFUSED: Final = "FirmwareUpgradeRefused"
FIRMWARE_UPGRADE_FAILED: Final = "FirmwareUpgradeFailed"
NODE_NEED_REBOOT: Final = "NodeNeedReboot"
"""R-FW: the seed's own reason after a firmware upgrade."""

# -- vfio-manager, on its Node ----------------------------------------------------------------------------------
INVALID_VFIO_CONFIG: Final = "InvalidVfioConfig"
VFIO_BIND_FAILED: Final = "VfioBindFailed"
IOMMU_DISABLED: Final = "IOMMUDisabled"

# -- maca, on its Node --------------------------------------------------------------------------------------------
MACA_INSTALLED: Final = "MacaInstalled"
"""An MXMACA version of ``maca.payload.images`` was installed on the node."""
MACA_REMOVED: Final = "MacaRemoved"
"""A version no longer listed, used by no live container, was removed."""
MACA_INSTALL_FAILED: Final = "MacaInstallFailed"
INVALID_MACA_PAYLOAD: Final = "InvalidMacaPayload"
"""The payload images' tags or contents cannot be installed (the message names the image)."""


# -- container-runtime, on its Node ---------------------------------------------------------------------------
RUNTIME_CONFIGURED: Final = "RuntimeConfigured"
"""The runtime's configuration now has the ``metax`` handler and the running daemon loaded it."""
RUNTIME_CONFIG_INVALID: Final = "RuntimeConfigInvalid"
"""The runtime's configuration cannot be read, or our edit does not load (``config dump``): nothing restarted."""
RUNTIME_RESTART_FAILED: Final = "RuntimeRestartFailed"
"""The runtime did not come back with the new configuration: the previous files were restored and it was restarted."""
RUNTIME_CONFIG_REPAIRED: Final = "RuntimeConfigRepaired"
"""Someone (config management) rewrote the runtime's configuration without our part; it was put back."""
RUNTIME_UNSUPPORTED: Final = "RuntimeUnsupported"
"""No supported runtime found on the node, or one too old (the message names what was found)."""


# -- topo-master, on a Node -------------------------------------------------------------------------------------
TOPOLOGY_UNREADABLE: Final = "TopologyUnreadable"
"""The Node's published topology document or scores do not parse (the message names the field)."""
TOPOLOGY_INCONSISTENT: Final = "TopologyInconsistent"
"""The Node's topology document disagrees with its labels (GPU count) or allocatable GPUs."""

# -- dra-driver, on its Node --------------------------------------------------------------------------------------
RESOURCE_SLICES_PUBLISHED: Final = "ResourceSlicesPublished"
"""The node's ResourceSlices changed (devices, slices and pool generation in the message, R-DRA)."""

# -- the node's allocator agent (gpu-device or dra-driver), on its Node: a GPU's verdict changed (R-HEALTH) --------
GPU_UNUSABLE: Final = "GPUUnusable"
"""A GPU is unusable (the message names it and its faults): Unhealthy in the device plugin, tainted on DRA."""
GPU_DEGRADED: Final = "GPUDegraded"
"""A GPU is degraded: it takes no new work until it recovers."""
GPU_RECOVERED: Final = "GPURecovered"
"""A GPU that was unusable or degraded is healthy again and offered again."""

# -- the operator, on a Node: remediation of an unusable GPU (gpuDevice.remediation: evict, R-HEALTH) ------------
GPU_REMEDIATION_EVICTED: Final = "GPURemediationEvicted"
"""The pods holding an unusable GPU were evicted (the message names the GPU and the pods)."""
GPU_REMEDIATION_BLOCKED: Final = "GPURemediationBlocked"
"""A pod holding an unusable GPU may not be evicted (a PodDisruptionBudget), or the node's remediation bound is
reached: the message says which, and when it is tried again."""


def driver_rollout(step_state: str) -> str:
    """The reason of the Event for a rollout step that entered ``step_state`` (e.g. ``StepPaused``)."""
    return DRIVER_ROLLOUT_PREFIX + step_state


ALL: Final = tuple(
    value for name, value in list(globals().items()) if name.isupper() and name != "DRIVER_ROLLOUT_PREFIX"
)
"""Every fixed reason, in the order above (the rollout's ``DriverRollout<StepState>`` are built by
`driver_rollout`). Gathered from the module, not listed again: a reason added above is in it."""
