"""What the kubelet device plugin advertises and hands out (C3, R-SGPU, R-VF, R-VFIO, R-READY).

gpu-device gathers the node's PCI functions, their health, the node's labels and the readiness of the
components it depends on; the functions here decide, from those facts alone, which devices each resource
(`Resource`) advertises and what a container receives for the devices kubelet allocated (which set of devices
a multi-device container should preferably get: `metax_core.node.preferred_allocation`). The gRPC server only
translates the answers.

Rules, in one place:
- ``metax-tech.com/gpu``: one device per function bound to the ``metax`` driver, except a PF that has VFs
  (its VFs are advertised instead, R-VF). Active in ``native`` mode.
- ``metax-tech.com/sgpu``: ``shares`` devices per such function. Active in ``sgpu`` mode instead of ``gpu``.
- ``metax-tech.com/vfio-gpu``: one device per function bound to ``vfio-pci`` (PF or VF, the same PF rule),
  active when there is one; needs the IOMMU on and an IOMMU group.
- A device is Unhealthy when its function (or its PF) is, or when the node's required components are not
  ready (R-READY): nothing is allocatable until every dependency works.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from metax_core.errors import MetaxError
from metax_core.health.verdict import Verdict
from metax_core.inventory import (
    METAX_MODULE,
    VFIO_DRIVER,
    FunctionKind,
    PciAddress,
    PciFunction,
)
from metax_core.node import cdi
from metax_core.wire import host, workload_env

MODE_LABEL = "metax-tech.com/gpu-device.mode"
QOS_LABEL = "metax-tech.com/gpu-device.qos-policy"
DEFAULT_SHARES = 16
"""sGPU devices per GPU: the seed's example shows 16 for one GPU (§3.2.10)."""

VISIBLE_DEVICES_ENV = workload_env.VISIBLE_DEVICES
QOS_ENV = workload_env.SGPU_QOS_POLICY
SHARES_ENV = workload_env.SGPU_SHARES
SHARES_PER_GPU_ENV = workload_env.SGPU_SHARES_PER_GPU
KUBEVIRT_PCI_PREFIX = "PCI_RESOURCE"
VFIO_CONTAINER_NODE = host.VFIO_CONTAINER


class Resource(enum.Enum):
    """The extended resources gpu-device serves, one plugin server (socket, registration) each."""

    GPU = "metax-tech.com/gpu"
    SGPU = "metax-tech.com/sgpu"
    VFIO_GPU = "metax-tech.com/vfio-gpu"

    @property
    def socket_name(self) -> str:
        """File name of the plugin's socket in kubelet's device-plugin directory."""
        return "metax-" + self.value.split("/", 1)[1] + ".sock"


class Mode(enum.Enum):
    NATIVE = "native"
    SGPU = "sgpu"


class QosPolicy(enum.Enum):
    """How sGPUs share a GPU's compute (Table 3.19)."""

    BEST_EFFORT = "best-effort"
    FIXED_SHARE = "fixed-share"
    BURST_SHARE = "burst-share"


@attrs.frozen
class NodeSettings:
    """What the node's labels ask of gpu-device; ``problems`` explains any value that was not understood."""

    mode: Mode = Mode.NATIVE
    qos: QosPolicy = QosPolicy.BEST_EFFORT
    problems: tuple[str, ...] = ()


def settings_from_labels(labels: Mapping[str, str]) -> NodeSettings:
    """Read mode and QoS policy; an unknown value falls back to ``native`` / ``best-effort`` with a reason."""
    problems: list[str] = []
    mode_text = labels.get(MODE_LABEL, Mode.NATIVE.value)
    try:
        mode = Mode(mode_text)
    except ValueError:
        mode = Mode.NATIVE
        allowed = ", ".join(m.value for m in Mode)
        problems.append(f"label {MODE_LABEL}={mode_text!r} is not one of {allowed}: running in native mode")
    qos_text = labels.get(QOS_LABEL, QosPolicy.BEST_EFFORT.value)
    try:
        qos = QosPolicy(qos_text)
    except ValueError:
        qos = QosPolicy.BEST_EFFORT
        allowed = ", ".join(q.value for q in QosPolicy)
        problems.append(f"label {QOS_LABEL}={qos_text!r} is not one of {allowed}: using best-effort")
    return NodeSettings(mode=mode, qos=qos, problems=tuple(problems))


@attrs.frozen
class Health:
    healthy: bool
    reason: str = ""

    @classmethod
    def of(cls, verdict: Verdict) -> Health:
        """A GPU with ``verdict`` as the device plugin offers it: Unhealthy while it is not fine, degraded or
        unusable (the kubelet has no third state; R-HEALTH), with the verdict's words."""
        return cls(verdict.fine, "" if verdict.fine else verdict.describe())


@attrs.frozen
class Device:
    """One device as kubelet sees it, with the function that backs it."""

    id: str
    resource: Resource
    function: PciFunction
    share: int | None = None
    healthy: bool = True
    reason: str = ""


@attrs.frozen
class Plan:
    """The devices of every active resource (inactive resources are absent) and what to tell the admin."""

    devices: Mapping[Resource, tuple[Device, ...]]
    problems: tuple[str, ...] = ()

    def active(self) -> frozenset[Resource]:
        return frozenset(self.devices)

    def by_id(self, resource: Resource) -> dict[str, Device]:
        return {d.id: d for d in self.devices.get(resource, ())}


def share_id(address: PciAddress, share: int) -> str:
    return f"{address}-{share:02d}"


def cdi_name(resource: Resource, device_id: str) -> str | None:
    """The CDI device name that Allocate returns for one device ID (an sGPU share names its GPU); None for
    ``vfio-gpu``, which needs no CDI entry."""
    if resource is Resource.GPU:
        return cdi.device_name(device_id)
    if resource is Resource.SGPU:
        return cdi.device_name(device_id.rpartition("-")[0] or device_id)
    return None


def vfio_nodes(groups: Iterable[int]) -> tuple[str, ...]:
    """The device nodes a holder of these IOMMU groups needs: the VFIO container and each group's node."""
    return (VFIO_CONTAINER_NODE, *(f"{host.VFIO_DIR}/{g}" for g in sorted(set(groups))))


def is_native(function: PciFunction) -> bool:
    """Bound to the MetaX driver (sysfs may spell it ``metax`` or ``METAX``)."""
    return function.driver is not None and function.driver.lower() == METAX_MODULE


def _has_vfs(function: PciFunction, vf_parents: Collection[PciAddress]) -> bool:
    if function.kind is not FunctionKind.PF:
        return False
    return function.address in vf_parents or function.sriov_numvfs > 0 or bool(function.vfs)


def plan_devices(
    functions: Sequence[PciFunction],
    *,
    settings: NodeSettings,
    shares: int,
    health: Mapping[PciAddress, Health],
    iommu_enabled: bool,
    ready: bool = True,
    not_ready_reason: str = "",
) -> Plan:
    """Decide every resource's devices from the node's functions, labels, health and readiness."""
    if shares < 1:
        raise ValueError(f"sGPU shares per GPU must be at least 1, got {shares}")
    ordered = sorted(functions, key=lambda f: f.address)
    vf_parents = {f.physfn for f in ordered if f.kind is FunctionKind.VF and f.physfn is not None}
    usable = [f for f in ordered if not _has_vfs(f, vf_parents)]
    native = [f for f in usable if is_native(f)]
    vfio = [f for f in usable if f.driver == VFIO_DRIVER]
    problems = list(settings.problems)

    def state(f: PciFunction) -> tuple[bool, str]:
        if not ready:
            return False, not_ready_reason
        h = health.get(f.address, Health(True))
        return h.healthy, h.reason

    devices: dict[Resource, tuple[Device, ...]] = {}
    if settings.mode is Mode.SGPU:
        devices[Resource.SGPU] = tuple(
            Device(share_id(f.address, s), Resource.SGPU, f, s, *state(f)) for f in native for s in range(shares)
        )
    else:
        devices[Resource.GPU] = tuple(Device(f.address, Resource.GPU, f, None, *state(f)) for f in native)
    if vfio and not iommu_enabled:
        problems.append(f"{len(vfio)} function(s) bound to vfio-pci but the IOMMU is off: vfio-gpu not advertised")
    elif vfio:
        grouped = [f for f in vfio if f.iommu_group is not None]
        for f in vfio:
            if f.iommu_group is None:
                problems.append(f"{f.address} is bound to vfio-pci but has no IOMMU group: not advertised")
        if grouped:
            devices[Resource.VFIO_GPU] = tuple(
                Device(f.address, Resource.VFIO_GPU, f, None, *state(f)) for f in grouped
            )
    return Plan(devices=devices, problems=tuple(problems))


def held_gpus(held: Mapping[str, Sequence[str]], functions: Sequence[PciFunction]) -> set[PciAddress]:
    """The physical GPUs behind the device IDs pods hold: a PF itself, a VF's PF, an sGPU share's GPU
    (``<address>-NN``, `devices.share_id`)."""
    by_address = {f.address: f for f in functions}
    out: set[PciAddress] = set()
    for ids in held.values():
        for device_id in ids:
            f = by_address.get(PciAddress(device_id)) or by_address.get(PciAddress(device_id.rsplit("-", 1)[0]))
            if f is not None:
                out.add(f.physfn or f.address)
    return out


def holders_by_function(
    holders: Mapping[str, Sequence[str]], functions: Sequence[PciFunction]
) -> dict[PciAddress, tuple[str, ...]]:
    """Device ID → the pods holding it (the kubelet's PodResources) as function → the pods holding any device of
    its physical GPU (the PF, its VFs, its sGPU shares ``<address>-NN``): a fault of the GPU reaches them all."""
    by_address = {f.address: f for f in functions}
    per_gpu: dict[PciAddress, set[str]] = {}
    for device_id, pods in holders.items():
        f = by_address.get(PciAddress(device_id)) or by_address.get(PciAddress(device_id.rsplit("-", 1)[0]))
        if f is not None:
            per_gpu.setdefault(f.physfn or f.address, set()).update(pods)
    return {f.address: tuple(sorted(per_gpu[g])) for f in functions if (g := f.physfn or f.address) in per_gpu}


# --- allocation ------------------------------------------------------------------------------------------


class AllocationRefused(MetaxError):
    """kubelet asked for devices this plugin cannot hand out (unknown or unhealthy)."""

    def __init__(self, resource: Resource, ids: Sequence[str], why: str) -> None:
        self.resource = resource
        self.ids = tuple(ids)
        self.why = why
        super().__init__(f"cannot allocate {resource.value} {', '.join(ids)}: {why}")


@attrs.frozen
class DeviceNode:
    host_path: str
    container_path: str
    permissions: str = "rw"


@attrs.frozen
class ContainerAllocation:
    """What one container gets: environment, device nodes, and the CDI devices naming the same GPUs."""

    envs: Mapping[str, str]
    devices: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = ()


def kubevirt_env_names(resource: Resource) -> tuple[str, ...]:
    """KubeVirt reads ``PCI_RESOURCE_<name>`` with the resource name upper-cased and only ``.``/``/`` replaced
    (``ResourceNameToEnvVar``), so dashes stay; the fully sanitised spelling is set too for tools that
    cannot read names with dashes."""
    kubevirt = resource.value.upper().replace("/", "_").replace(".", "_")
    return (f"{KUBEVIRT_PCI_PREFIX}_{kubevirt}", f"{KUBEVIRT_PCI_PREFIX}_{kubevirt.replace('-', '_')}")


AllocationKey = tuple[Resource, tuple[str, ...]]


def allocation_key(resource: Resource, ids: Iterable[str]) -> AllocationKey:
    """What `plan_allocation`'s answer depends on besides the plan: the resource and the multiset of IDs.
    kubelet sends a container's IDs from a set, in no fixed order; any order gives the same key."""
    return resource, tuple(sorted(ids))


def plan_allocation(
    resource: Resource,
    ids: Sequence[str],
    *,
    plan: Plan,
    device_nodes: Mapping[PciAddress, Sequence[str]],
    qos: QosPolicy,
    shares: int,
    with_cdi: bool = True,
    resolvable: Collection[str] | None = None,
) -> ContainerAllocation:
    """The response for one container's devices; refuses unknown and unhealthy devices, and (with
    ``resolvable``, the CDI device names in the spec on disk) devices whose CDI entry is not there: a
    container could not be created with them.

    For the same plan and other inputs, the allocation returned depends on ``ids`` only through `allocation_key`
    (not on their order): a caller may keep it per key while they stay the same (a refusal names the IDs
    in the order given)."""
    known = plan.by_id(resource)
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise AllocationRefused(resource, unknown, "not advertised by this node (any more)")
    chosen = [known[i] for i in ids]
    sick = [d.id for d in chosen if not d.healthy]
    if sick:
        raise AllocationRefused(resource, sick, "unhealthy: " + "; ".join({known[i].reason for i in sick}))
    if with_cdi and resolvable is not None:
        missing = [d.id for d in chosen if (n := cdi_name(resource, d.id)) is not None and n not in resolvable]
        if missing:
            raise AllocationRefused(
                resource,
                missing,
                f"no entry in the CDI spec on disk (kind {cdi.KIND}): the runtime could not inject it",
            )
    addresses = sorted({d.function.address for d in chosen})
    joined = ",".join(addresses)
    if resource is Resource.VFIO_GPU:
        vfio = vfio_nodes(d.function.iommu_group for d in chosen if d.function.iommu_group is not None)
        return ContainerAllocation(
            envs=dict.fromkeys(kubevirt_env_names(resource), joined),
            devices=tuple(DeviceNode(p, p, "rw") for p in vfio),
        )
    paths = list(dict.fromkeys(p for a in addresses for p in device_nodes.get(a, ())))
    envs = {VISIBLE_DEVICES_ENV: joined}
    if resource is Resource.SGPU:
        counts = {a: sum(1 for d in chosen if d.function.address == a) for a in addresses}
        envs[QOS_ENV] = qos.value
        envs[SHARES_PER_GPU_ENV] = str(shares)
        envs[SHARES_ENV] = ",".join(f"{a}={n}" for a, n in counts.items())
    names = tuple(cdi.qualified_name(cdi.device_name(a)) for a in addresses) if with_cdi else ()
    return ContainerAllocation(envs=envs, devices=tuple(DeviceNode(p, p, "rw") for p in paths), cdi_devices=names)


def cdi_devices(plan: Plan, device_nodes: Mapping[PciAddress, Sequence[str]]) -> tuple[cdi.CdiDevice, ...]:
    """The CDI devices to describe: one per function the gpu or sgpu resource hands out."""
    functions = {d.function.address: d.function for r in (Resource.GPU, Resource.SGPU) for d in plan.devices.get(r, ())}
    return tuple(cdi.CdiDevice(cdi.device_name(a), tuple(device_nodes.get(a, ()))) for a in sorted(functions))


def device_address(resource: Resource, device_id: str) -> PciAddress:
    """The PCI function behind a device ID this plugin advertised (an sGPU share's ID names its GPU,
    `share_id`); the reader of the IDs kubelet's PodResources API hands back (the data-exporter)."""
    if resource is Resource.SGPU:
        return PciAddress(device_id.rpartition("-")[0] or device_id)
    return PciAddress(device_id)
