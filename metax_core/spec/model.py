"""The ClusterOperator spec (= the chart's values), as typed, frozen records.

Every option of the chart reference (001 Tables 3.1–3.18, R-VALUES) is here with its documented default.
The models hold no conversion rules: `metax_core.spec.converter` turns documents into these records (and back),
and `metax_core.spec.validation` checks the rules that span fields. Keys in documents are camelCase; attribute
names here are the same words in snake_case (``upgradePolicy.maxParallel`` → ``upgrade_policy.max_parallel``).

Options the seeds do not list but a mature operator needs are marked "extension" and documented in
docs/configuration.md.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

API_GROUP = "gpu.metax-tech.com"
API_VERSION = "v1alpha1"
KIND = "ClusterOperator"
OBJECT_NAME = "cluster-operator"
"""The one ClusterOperator object the chart creates (R-INSTALL)."""
NAMESPACE = "metax-operator"


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


class ServiceType(enum.Enum):
    """How the data-exporter Service is exposed (Table 3.14)."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"
    EXTERNAL_NAME = "ExternalName"


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

    key: str | None = None
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None


@attrs.frozen
class PodSpecOverrides:
    """The only pod spec fields an administrator may set per workload (Table 3.15)."""

    node_selector: Mapping[str, str] | None = None
    affinity: Mapping[str, Any] | None = None
    """A core/v1 Affinity, kept as the raw mapping: the operator passes it through unchanged."""
    tolerations: tuple[Toleration, ...] | None = None


@attrs.frozen
class PodTemplateSpec:
    """A PodTemplateSpec-compatible override (global or per component, R-MERGE)."""

    spec: PodSpecOverrides = PodSpecOverrides()


@attrs.frozen
class Log:
    level: LogLevel = LogLevel.INFO


@attrs.frozen
class GpuDevice:
    """Table 3.2: the device plugin."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None
    healthy_interval: int = 5
    """Seconds between health checks; 0 disables them."""
    sgpu_shares: int = 16
    """Extension: sGPU shares advertised per GPU in sgpu mode (the §3.2.10 example shows 16)."""


@attrs.frozen
class GpuLabel:
    """Table 3.3: node labels."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None


@attrs.frozen
class DriverPayload:
    """Table 3.10: the image that carries the kernel driver (and firmware)."""

    name: str = "driver-image"
    version: str | None = None
    """Required unless driver.deployPolicy is Never."""
    registry: str | None = None
    """Defaults to the global registry."""


@attrs.frozen
class UpgradeStep:
    """One batch of the canary rollout (Table 3.11)."""

    replicas: IntOrPercent
    """How many nodes run the new driver when this step is done (% of nodes in scope, rounded up, ≥ 1)."""
    pause: bool | None = None
    """Extension: false = go straight on to the next step; null/true = pause (see pauseDuration)."""
    pause_duration: int | None = None
    """Milliseconds to wait before the next step; unset = wait until an administrator sets pause: false."""
    toleration: IntOrPercent = ZERO_PERCENT
    """Failed nodes this step tolerates (% of the step's nodes, rounded down)."""


@attrs.frozen
class UpgradePolicy:
    """Table 3.11: batched canary upgrade of the kernel driver (R-ROLLOUT)."""

    enable_rollout: bool = False
    upgrade_steps: tuple[UpgradeStep, ...] = ()
    pause: bool = False
    max_parallel: IntOrPercent = HUNDRED_PERCENT
    max_unavailable: IntOrPercent = ZERO_PERCENT
    max_failure_threshold: int = 0
    fallback: Fallback = Fallback.PAUSE


@attrs.frozen
class Driver:
    """Table 3.4: the driver-manager (kernel driver, VFs, module params, firmware)."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None
    deploy_policy: DeployPolicy = DeployPolicy.PREFER_CLOUD
    payload: DriverPayload = DriverPayload()
    fw_upgrade_policy: FirmwarePolicy = FirmwarePolicy.NEVER
    fw_enable_virt: bool = False
    upgrade_policy: UpgradePolicy = UpgradePolicy()


@attrs.frozen
class VfioConfigEntry:
    """Table 3.7: which GPUs of the nodes whose whole name matches ``node_name`` go to vfio-pci."""

    node_name: str
    gpus: str
    """Comma-separated GPU indexes ("0,1,2") or "all"."""


@attrs.frozen
class VfioManager:
    """Table 3.6 (chart key ``vfioManager``; Table 3.1's ``vfio-manager`` is a known mistake)."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None
    vfio_config: tuple[VfioConfigEntry, ...] = ()


@attrs.frozen
class MacaPayload:
    """Table 3.12: MXMACA SDK images, each with an explicit tag."""

    images: tuple[str, ...] = ()
    registry: str | None = None


@attrs.frozen
class Maca:
    """Table 3.8: the MXMACA SDK manager."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None
    payload: MacaPayload = MacaPayload()


@attrs.frozen
class Runtime:
    """Table 3.9: container runtime configuration."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None


@attrs.frozen
class ExporterService:
    """Table 3.14."""

    type: ServiceType = ServiceType.CLUSTER_IP
    port: int | None = None
    """Only used with NodePort (the node port) and LoadBalancer (the service port)."""
    external_name: str | None = None
    """Extension: the DNS name an ExternalName Service points at (required with that type)."""


@attrs.frozen
class Exporter:
    """Table 3.13: Prometheus metrics (off by default)."""

    deploy: bool = False
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None
    service: ExporterService = ExporterService()


@attrs.frozen
class Topo:
    """Extension: topology discovery (topo-master Deployment + topo-worker DaemonSet, C7)."""

    deploy: bool = True
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None


@attrs.frozen
class GpuScheduler:
    """Extension: topology-aware scheduling help (C9); opt-in because it changes placement."""

    deploy: bool = False
    log: Log = Log()
    pod_template_spec: PodTemplateSpec | None = None


@attrs.frozen
class ClusterOperatorSpec:
    """Table 3.1: the whole spec of the ``cluster-operator`` object."""

    registry: str = ""
    """Where every component image (and, by default, the payloads) comes from."""
    image_pull_secrets: tuple[str, ...] = ()
    """Extension: names of Secrets in the operator namespace used to pull images."""
    pod_template_spec: PodTemplateSpec | None = None
    tolerations: tuple[Toleration, ...] | None = None
    """Deprecated (§3.2.4): applies to every component; podTemplateSpec.spec.tolerations wins over it."""
    gpu_device: GpuDevice = GpuDevice()
    gpu_label: GpuLabel = GpuLabel()
    driver: Driver = Driver()
    vfio_manager: VfioManager = VfioManager()
    maca: Maca = Maca()
    runtime: Runtime = Runtime()
    exporter: Exporter = Exporter()
    topo: Topo = Topo()
    gpu_scheduler: GpuScheduler = GpuScheduler()


ComponentSpec = GpuDevice | GpuLabel | Driver | VfioManager | Maca | Runtime | Exporter | Topo | GpuScheduler
"""Any per-component section: each has ``deploy``, ``log`` and ``pod_template_spec``."""
