"""The value types and enums the ClusterOperator spec is built from (R-VALUES).

Why a module of its own: `metax_core.spec.model` holds the components' records (one per chart section); the
enums of their options, the int-or-percent count, tolerations and the pod template override are shared by
many of them and by the rollout and cluster code. `model` re-exports every name here, so callers keep writing
``spec.IntOrPercent``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

DESCRIPTION = "description"
"""The attrs metadata key of every field's description (the CRD's ``description``, `kubectl explain`)."""


class DeployPolicy(enum.Enum):
    """Which kernel driver a node runs (Table 3.5, R-DRIVER)."""

    PREFER_CLOUD = "PreferCloud"
    PREFER_HOST = "PreferHost"
    PREFER_NEWER = "PreferNewer"
    NEVER = "Never"


class FirmwarePolicy(enum.Enum):
    """Whether firmware is upgraded from the driver payload (Table 3.17, R-FW)."""

    NEVER = "Never"
    PREFER_CLOUD = "PreferCloud"


class Fallback(enum.Enum):
    """What a rollout does when a step has failed more than maxFailureThreshold times (Table 3.11)."""

    PAUSE = "pause"
    ROLLBACK = "rollback"


class OnCanaryFailure(enum.Enum):
    """What a failed node in the rollout's first step (the canary) does (issue 41 item 2, docs/rollout.md)."""

    FALLBACK = "fallback"
    """As in any step: maxFailureThreshold retries, then the fallback (what an unset field means)."""
    ROLLBACK = "rollback"
    """The canary's nodes go back to the previous driver at once, without retries; the rollout ends rolled back."""


class Remediation(enum.Enum):
    """What the operator does to the pods on a GPU whose verdict is unusable (R-HEALTH, docs/health.md)."""

    NONE = "none"
    """Nothing: the GPU is withdrawn from new work; its pods keep running (what an unset field means)."""
    EVICT = "evict"
    """The pods holding that GPU are evicted through the Eviction API (PodDisruptionBudgets honoured), at most
    `metax_core.cluster.gpu_remediation.BOUND` per node and window; never the node's other pods."""


class ServiceType(enum.Enum):
    """How the data-exporter Service is exposed (Table 3.14)."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"
    EXTERNAL_NAME = "ExternalName"


class Allocation(enum.Enum):
    """Which allocator serves a GPU node's devices unless its node label says otherwise (R-DRA, docs/dra.md)."""

    DEVICE_PLUGIN = "devicePlugin"
    DRA = "dra"


class RestartMode(enum.Enum):
    """How container-runtime restarts the node's runtime after configuring it (extension; docs/container-runtime.md)."""

    SYSTEMD = "systemd"
    """``systemctl restart <unit>`` in the host's namespaces."""
    SIGNAL = "signal"
    """A signal to the process serving the runtime's socket: SIGTERM (containerd, CRI-O), whose supervisor starts
    it again (systemd's ``Restart=always``, runit, s6, daemontools); SIGHUP to dockerd, which reloads."""
    NONE = "none"
    """Never: the administrator restarts it; the node is not ready until the running daemon has the handler."""


class LogLevel(enum.Enum):
    """Log verbosity of a component (the `log` struct; extension of the GPU Extensions Table 2.8)."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class TolerationOperator(enum.Enum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(enum.Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@attrs.frozen
class IntOrPercent:
    """A Kubernetes int-or-string count: either an absolute number or a percentage of some total."""

    value: int
    percent: bool = False

    @classmethod
    def of_percent(cls, value: int) -> IntOrPercent:
        return cls(value, percent=True)

    def resolve(self, total: int, *, round_up: bool) -> int:
        """The absolute count for ``total`` items; percentages round up or down as the option says."""
        if not self.percent:
            return self.value
        exact = self.value * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


ZERO_PERCENT = IntOrPercent.of_percent(0)
HUNDRED_PERCENT = IntOrPercent.of_percent(100)


@attrs.frozen
class Toleration:
    """A Kubernetes toleration (core/v1), the fields the operator reads and writes."""

    key: str | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Taint key the toleration matches; empty with operator Exists matches every taint."},
    )
    operator: TolerationOperator = attrs.field(
        default=TolerationOperator.EQUAL, metadata={DESCRIPTION: "Exists or Equal (the default)."}
    )
    value: str | None = attrs.field(
        default=None, metadata={DESCRIPTION: "Taint value to match with operator Equal; empty with Exists."}
    )
    effect: TaintEffect | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Taint effect to match (NoSchedule, PreferNoSchedule, NoExecute); empty matches all."},
    )
    toleration_seconds: int | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "With effect NoExecute: seconds the pod stays on a tainted node (0 to 31536000)."},
    )


@attrs.frozen
class PodSpecOverrides:
    """The only pod spec fields an administrator may set per workload (Table 3.15)."""

    node_selector: Mapping[str, str] | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: "Node labels the pods require (merged into the component's default, same key overwritten)."
        },
    )
    affinity: Mapping[str, Any] | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: "A core/v1 Affinity, kept as the raw mapping: the operator passes it through unchanged."
        },
    )
    tolerations: tuple[Toleration, ...] | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Tolerations of the pods (appended to the component's defaults; at most 64)."},
    )


@attrs.frozen
class PodTemplateSpec:
    """A PodTemplateSpec-compatible override (global or per component, R-MERGE)."""

    spec: PodSpecOverrides = attrs.field(
        default=PodSpecOverrides(), metadata={DESCRIPTION: "The pod spec fields an administrator may set."}
    )


@attrs.frozen
class Log:
    level: LogLevel = attrs.field(
        default=LogLevel.INFO, metadata={DESCRIPTION: "Log verbosity: debug, info, warning or error."}
    )


@attrs.frozen
class NetworkPolicy:
    """Extension: who may reach a component's port (issue 38 item 4, docs/security.md "Network")."""

    enabled: bool | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Whether the operator renders a NetworkPolicy that admits only allowedFrom to the port; null: yes, "
                "except the exporter behind a NodePort or LoadBalancer Service (its scrapers are outside)."
            )
        },
    )
    allowed_from: tuple[Mapping[str, Any], ...] | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "core/v1 NetworkPolicyPeers (ipBlock, namespaceSelector, podSelector) allowed in; null: the "
                "component's default (the exporter: pods labelled app.kubernetes.io/name=prometheus in any "
                "namespace; the scheduler extender: any source, as kube-scheduler runs on the control plane's host "
                "network: name your control-plane nodes' addresses as an ipBlock)."
            )
        },
    )


@attrs.frozen
class Drain:
    """Extension (issue 41 item 3, docs/rollout.md "Draining"): when the rollout wants a node that runs GPU workloads,
    cordon it and evict those workloads through the Eviction API (PodDisruptionBudgets hold), instead of waiting
    for them to end. Only pods that hold MetaX devices are evicted, never the product's own."""

    enable: bool = attrs.field(
        default=False,
        metadata={DESCRIPTION: "Drain busy nodes the rollout wants; false: wait for their GPU workloads to end."},
    )
    timeout_seconds: int = attrs.field(
        default=600,
        metadata={
            DESCRIPTION: (
                "Seconds a node may take to drain. Then it is uncordoned and released (status names what blocked "
                "it), and tried again after the other nodes."
            )
        },
    )
    pod_selector: Mapping[str, str] | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Labels a GPU pod must carry to be evicted (matchLabels); a GPU pod without them blocks the drain. "
                "Unset: every GPU pod may be evicted."
            )
        },
    )
    delete_empty_dir: bool = attrs.field(
        default=False,
        metadata={DESCRIPTION: "Evict GPU pods with emptyDir volumes (their data is lost); false: such a pod blocks."},
    )
    force: bool = attrs.field(
        default=False,
        metadata={
            DESCRIPTION: "Evict GPU pods no controller recreates (bare pods: gone for good); false: such a pod blocks."
        },
    )
