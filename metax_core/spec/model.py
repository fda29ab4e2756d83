"""The ClusterOperator spec (= the chart's values), as typed, frozen records.

Every option of the chart reference (001 Tables 3.1–3.18, R-VALUES) is here with its documented default (the
value types in `fieldtypes`, the upgrade policies in `upgrade`; both re-exported here).
The models hold no conversion rules: `metax_core.spec.converter` turns documents into these records (and back),
and `metax_core.spec.validation` checks the rules that span fields. Keys in documents are camelCase; attribute
names here are the same words in snake_case (``upgradePolicy.maxParallel`` → ``upgrade_policy.max_parallel``).

Options the seeds do not list but a mature operator needs are marked "extension" and documented in
docs/configuration.md.
"""

from __future__ import annotations

import attrs

from metax_core.spec import fieldtypes, quantity, section_fields, upgrade

# The value types and upgrade policies, re-exported: callers write ``spec.IntOrPercent`` or ``spec.UpgradePolicy``
# whichever module defines it.
DESCRIPTION = fieldtypes.DESCRIPTION
DeployPolicy = fieldtypes.DeployPolicy
FirmwarePolicy = fieldtypes.FirmwarePolicy
Fallback = fieldtypes.Fallback
OnCanaryFailure = fieldtypes.OnCanaryFailure
Drain = fieldtypes.Drain
Remediation = fieldtypes.Remediation
ServiceType = fieldtypes.ServiceType
Allocation = fieldtypes.Allocation
LogLevel = fieldtypes.LogLevel
TolerationOperator = fieldtypes.TolerationOperator
TaintEffect = fieldtypes.TaintEffect
IntOrPercent = fieldtypes.IntOrPercent
ZERO_PERCENT = fieldtypes.ZERO_PERCENT
HUNDRED_PERCENT = fieldtypes.HUNDRED_PERCENT
Toleration = fieldtypes.Toleration
PodSpecOverrides = fieldtypes.PodSpecOverrides
PodTemplateSpec = fieldtypes.PodTemplateSpec
Log = fieldtypes.Log
RestartMode = fieldtypes.RestartMode
Quantity = quantity.Quantity
NetworkPolicy = fieldtypes.NetworkPolicy
ResourceList = quantity.ResourceList
Resources = quantity.Resources
UpgradeStep = upgrade.UpgradeStep
UpgradePolicy = upgrade.UpgradePolicy
AgentUpdate = upgrade.AgentUpdate

API_GROUP = "gpu.metax-tech.com"
API_VERSION = "v1alpha1"
KIND = "ClusterOperator"
PLURAL = "clusteroperators"
"""The CRD's resource name: ``clusteroperators.gpu.metax-tech.com`` (R-INSTALL)."""
OBJECT_NAME = "cluster-operator"
"""The one ClusterOperator object the chart creates (R-INSTALL)."""
NAMESPACE = "metax-operator"


@attrs.frozen
class GpuDevice:
    """Table 3.2: the device plugin."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    healthy_interval: int = attrs.field(
        default=5, metadata={DESCRIPTION: "Seconds between health checks; 0 disables them."}
    )
    sgpu_shares: int = attrs.field(
        default=16,
        metadata={
            DESCRIPTION: "Extension: sGPU shares advertised per GPU in sgpu mode (the §3.2.10 example shows 16)."
        },
    )
    remediation: Remediation | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Extension: what happens to the pods on a GPU whose health verdict is unusable. evict: the operator "
                "evicts the pods holding that GPU (Eviction API, PodDisruptionBudgets honoured), at most 2 GPUs per "
                "node per hour; none or unset: nothing, the GPU only takes no new work."
            )
        },
    )


@attrs.frozen
class GpuLabel:
    """Table 3.3: node labels."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()


@attrs.frozen
class DriverPayload:
    """Table 3.10: the image that carries the kernel driver (and firmware)."""

    name: str = attrs.field(
        default="driver-image", metadata={DESCRIPTION: "Image name of the driver payload (without registry or tag)."}
    )
    version: str | None = attrs.field(
        default=None, metadata={DESCRIPTION: "Required unless driver.deployPolicy is Never."}
    )
    registry: str | None = attrs.field(default=None, metadata={DESCRIPTION: "Defaults to the global registry."})


@attrs.frozen
class Driver:
    """Table 3.4: the driver-manager (kernel driver, VFs, module params, firmware)."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    deploy_policy: DeployPolicy = attrs.field(
        default=DeployPolicy.PREFER_CLOUD,
        metadata={
            DESCRIPTION: "Which kernel driver a node runs: PreferCloud (the payload), PreferHost, PreferNewer or Never."
        },
    )
    payload: DriverPayload = attrs.field(
        default=DriverPayload(), metadata={DESCRIPTION: "The image that carries the kernel driver and firmware."}
    )
    fw_upgrade_policy: FirmwarePolicy = attrs.field(
        default=FirmwarePolicy.NEVER,
        metadata={DESCRIPTION: "Never, or PreferCloud to upgrade GPU firmware from the driver payload."},
    )
    fw_enable_virt: bool = attrs.field(
        default=False, metadata={DESCRIPTION: "Flash the virtualisation (SR-IOV) firmware instead of the plain one."}
    )
    upgrade_policy: UpgradePolicy = attrs.field(
        default=UpgradePolicy(), metadata={DESCRIPTION: "How a new driver is rolled out across the nodes (R-ROLLOUT)."}
    )


@attrs.frozen
class VfioConfigEntry:
    """Table 3.7: which GPUs of the nodes whose whole name matches ``node_name`` go to vfio-pci."""

    node_name: str = attrs.field(
        metadata={
            DESCRIPTION: "An RE2 regular expression matched against the WHOLE node name (at most 1024 characters)."
        }
    )
    gpus: str = attrs.field(
        metadata={DESCRIPTION: 'Comma-separated GPU indexes ("0,1,2") or "all"; also one index (1) or a list ([0, 1]).'}
    )


@attrs.frozen
class VfioManager:
    """Table 3.6 (chart key ``vfioManager``; Table 3.1's ``vfio-manager`` is a known mistake)."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    vfio_config: tuple[VfioConfigEntry, ...] = attrs.field(
        default=(),
        metadata={
            DESCRIPTION: "Which GPUs of which nodes are bound to vfio-pci; the first matching entry wins (at most 256)."
        },
    )


@attrs.frozen
class MacaPayload:
    """Table 3.12: MXMACA SDK images, each with an explicit tag."""

    images: tuple[str, ...] = attrs.field(
        default=(),
        metadata={DESCRIPTION: "MXMACA SDK images, each with an explicit tag starting with its version (at most 64)."},
    )
    registry: str | None = attrs.field(
        default=None, metadata={DESCRIPTION: "Registry of the SDK images; defaults to the global registry."}
    )


@attrs.frozen
class Maca:
    """Table 3.8: the MXMACA SDK manager."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    payload: MacaPayload = attrs.field(
        default=MacaPayload(),
        metadata={DESCRIPTION: "The MXMACA SDK images the maca agent installs on every GPU node."},
    )


@attrs.frozen
class Runtime:
    """Table 3.9: container runtime configuration."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    restart_mode: RestartMode = attrs.field(
        default=RestartMode.SYSTEMD,
        metadata={
            DESCRIPTION: (
                "Extension: how the agent restarts the node's container runtime after configuring it: systemd "
                "(systemctl restart in the host's namespaces), signal (SIGTERM to the process serving the runtime's "
                "socket, whose supervisor starts it again: systemd's Restart=always, runit, s6; SIGHUP to dockerd, "
                "which reloads) or none (the administrator restarts it; the node is not ready until then)."
            )
        },
    )
    socket: str | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Extension: the runtime's CRI socket on the host when it is not the usual one "
                "(/run/containerd/containerd.sock, /run/crio/crio.sock, /run/docker.sock), e.g. k3s's "
                "/run/k3s/containerd/containerd.sock; an absolute path."
            )
        },
    )


@attrs.frozen
class ExporterService:
    """Table 3.14."""

    type: ServiceType = attrs.field(
        default=ServiceType.CLUSTER_IP,
        metadata={
            DESCRIPTION: "How the metrics Service is exposed: ClusterIP, NodePort, LoadBalancer or ExternalName."
        },
    )
    port: int | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Only used with NodePort (the node port) and LoadBalancer (the service port)."},
    )
    external_name: str | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Extension: the DNS name an ExternalName Service points at (required with that type)."},
    )


@attrs.frozen
class Exporter:
    """Table 3.13: Prometheus metrics (off by default)."""

    deploy: bool = section_fields.deploy(default=False)
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    service: ExporterService = attrs.field(
        default=ExporterService(), metadata={DESCRIPTION: "The Service in front of the exporter."}
    )
    sample_interval: int = attrs.field(
        default=5,
        metadata={
            DESCRIPTION: (
                "Extension: seconds between telemetry samples (mx-smi and the kubelet's PodResources); a scrape "
                "serves the latest sample and never waits on the hardware."
            )
        },
    )
    exported_pod_labels: bool = attrs.field(
        default=False,
        metadata={
            DESCRIPTION: (
                "Extension: label pods exported_namespace/exported_pod/exported_container as MetaX's mx-exporter "
                "does, instead of namespace/pod/container."
            )
        },
    )
    network_policy: NetworkPolicy = attrs.field(
        default=NetworkPolicy(), metadata={DESCRIPTION: "Extension: who may scrape the exporter's metrics port."}
    )


@attrs.frozen
class Topo:
    """Extension: topology discovery (topo-master Deployment + topo-worker DaemonSet, C7)."""

    deploy: bool = section_fields.deploy()
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()


@attrs.frozen
class GpuScheduler:
    """Extension: topology-aware scheduling help (C9); opt-in because it changes placement."""

    deploy: bool = attrs.field(
        default=False,
        metadata={
            DESCRIPTION: (
                "Whether the operator deploys the kube-scheduler extender (Deployment and Service "
                "metax-gpu-scheduler); the cluster's scheduler configuration then lists it (docs/scheduler.md)."
            )
        },
    )
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    network_policy: NetworkPolicy = attrs.field(
        default=NetworkPolicy(), metadata={DESCRIPTION: "Extension: who may call the extender's port."}
    )


@attrs.frozen
class DraDriver:
    """Extension: the Dynamic Resource Allocation driver (R-DRA, docs/dra.md); opt-in, per node instead of the
    device plugin."""

    deploy: bool = attrs.field(
        default=False,
        metadata={
            DESCRIPTION: (
                "Whether the operator deploys the DRA driver (DaemonSet metax-dra-driver) and the DeviceClasses "
                "gpu.metax-tech.com and vfio-gpu.metax-tech.com; each GPU node is then served by exactly one of "
                "the device plugin and the DRA driver."
            )
        },
    )
    log: Log = section_fields.log()
    pod_template_spec: PodTemplateSpec | None = section_fields.pod_template_spec()
    resources: Resources | None = section_fields.resources()
    default_allocation: Allocation = attrs.field(
        default=Allocation.DEVICE_PLUGIN,
        metadata={
            DESCRIPTION: (
                "Which allocator serves a GPU node whose label metax-tech.com/gpu.allocation is absent or "
                "invalid: devicePlugin or dra (the label's values are device-plugin and dra)."
            )
        },
    )


NEW_FIELDS: tuple[str, ...] = ("agentUpdate",)
"""Top-level spec fields this release added (R-UPGRADE, docs/upgrade.md "New fields"). They have no default in the
CRD's schema and none in the chart's values.yaml, so they are absent from cluster-operator unless an administrator
sets them: the previous release's webhook, still serving during ``helm upgrade``, never sees them, and after a
``helm rollback`` the previous release's operator never reads back a default the newer CRD would have written
(structural defaults apply on every read). The operator's own default applies when a field is absent. A field
leaves this list one release after it was added."""


@attrs.frozen
class ClusterOperatorSpec:
    """Table 3.1: the whole spec of the ``cluster-operator`` object."""

    registry: str = attrs.field(
        default="", metadata={DESCRIPTION: "Where every component image (and, by default, the payloads) comes from."}
    )
    image_pull_secrets: tuple[str, ...] = attrs.field(
        default=(), metadata={DESCRIPTION: "Extension: names of Secrets in the operator namespace used to pull images."}
    )
    pod_template_spec: PodTemplateSpec | None = attrs.field(
        default=None,
        metadata={DESCRIPTION: "Pod settings for every component that has no podTemplateSpec of its own (R-MERGE)."},
    )
    tolerations: tuple[Toleration, ...] | None = attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Deprecated (§3.2.4): applies to every component; podTemplateSpec.spec.tolerations wins over it."
            )
        },
    )
    gpu_device: GpuDevice = attrs.field(default=GpuDevice(), metadata={DESCRIPTION: "The device plugin (gpu-device)."})
    gpu_label: GpuLabel = attrs.field(default=GpuLabel(), metadata={DESCRIPTION: "Node labelling (gpu-label)."})
    driver: Driver = attrs.field(default=Driver(), metadata={DESCRIPTION: "The kernel driver manager (driver)."})
    vfio_manager: VfioManager = attrs.field(
        default=VfioManager(), metadata={DESCRIPTION: "vfio-pci binding for virtual machines (vfio-manager)."}
    )
    maca: Maca = attrs.field(default=Maca(), metadata={DESCRIPTION: "The MXMACA SDK manager (maca)."})
    runtime: Runtime = attrs.field(
        default=Runtime(), metadata={DESCRIPTION: "Container runtime configuration (container-runtime)."}
    )
    exporter: Exporter = attrs.field(default=Exporter(), metadata={DESCRIPTION: "Prometheus metrics (data-exporter)."})
    topo: Topo = attrs.field(
        default=Topo(), metadata={DESCRIPTION: "Topology discovery (topo-master and topo-worker)."}
    )
    gpu_scheduler: GpuScheduler = attrs.field(
        default=GpuScheduler(), metadata={DESCRIPTION: "Topology-aware scheduling help (gpu-scheduler)."}
    )
    dra_driver: DraDriver = attrs.field(
        default=DraDriver(),
        metadata={DESCRIPTION: "Extension: Dynamic Resource Allocation instead of the device plugin (dra-driver)."},
    )
    agent_update: AgentUpdate = attrs.field(
        default=AgentUpdate(),
        metadata={DESCRIPTION: "Extension: how the node agents roll when the operator itself is upgraded."},
    )


ComponentSpec = (
    GpuDevice | GpuLabel | Driver | VfioManager | Maca | Runtime | Exporter | Topo | GpuScheduler | DraDriver
)
"""Any per-component section: each has ``deploy``, ``log`` and ``pod_template_spec``."""
