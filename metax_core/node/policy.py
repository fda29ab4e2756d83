"""Which kernel driver a node runs (R-DRIVER) and whether its GPUs' firmware is flashed (R-FW).

The driver-manager on each node gathers facts (host driver version, payload version, firmware versions,
PCI functions, whether it runs on bare metal), asks these functions, and acts on the answer. Keeping the
rules here means Table 3.5 and the §3.2.9 restrictions are tested once, without a node, and every refusal
comes with a reason an administrator can act on.

Versions compare number by number (`metax_core.versions`), with trailing zeros ignored, so ``2.18`` and
``2.18.0`` are the same driver and ``2.18.10`` is newer than ``2.18.9``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

import attrs

from metax_core import versions
from metax_core.errors import FieldError, MetaxError
from metax_core.inventory import (
    DriverVersion,
    FirmwareInfo,
    FunctionKind,
    PciAddress,
    PciFunction,
)
from metax_core.spec import model as spec
from metax_core.wire import event_reasons

NODE_NEED_REBOOT_REASON = event_reasons.NODE_NEED_REBOOT
"""Event reason on the Node after a successful firmware flash (§3.2.9)."""
NODE_NEED_REBOOT_MESSAGE = "firmware upgrade done, need reboot machine to take effect"
"""Event message on the Node after a successful firmware flash, word for word as §3.2.9 prints it."""

VBIOS_BOUNDARY = versions.Version((1, 12, 0, 0))
"""§3.2.9: every GPU of a node must be below this VBIOS version or every GPU at or above it."""


def _key(version: versions.Version) -> tuple[int, ...]:
    """Numbers only, trailing zeros dropped: 2.18 == 2.18.0, and the suffix never decides."""
    numbers = list(version.numbers)
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _parse_loose(text: str) -> versions.Version | None:
    """A driver or firmware version: ``2.18.0``, ``v2.18.0-rc1`` or an image tag ``2.18.0-ubuntu22.04``."""
    return versions.try_parse(text) or versions.version_of_tag(text.strip())


# ---------------------------------------------------------------------------------------------------------
# R-DRIVER


class DriverSource(enum.Enum):
    """Where the kernel driver a node should run comes from."""

    HOST = "host"
    """The driver already installed on the host (the node's own ``metax`` module)."""
    PAYLOAD = "payload"
    """The driver in the ``driver.payload`` image."""
    UNMANAGED = "unmanaged"
    """deployPolicy Never: the operator leaves the kernel driver alone."""


@attrs.frozen
class DriverChoice:
    """The answer of `choose_driver`: which driver, which version, and why (for logs, events and status)."""

    source: DriverSource
    version: str | None
    """The chosen driver's version; for UNMANAGED the host's version (None when there is none)."""
    reason: str


def _need_payload(policy: spec.DeployPolicy, payload_version: str | None) -> str:
    if not payload_version or not payload_version.strip():
        raise MetaxError(
            f"driver.payload.version is required with driver.deployPolicy {policy.value}: "
            "the payload image is where the driver comes from (set it, or use deployPolicy Never)"
        )
    return payload_version.strip()


def choose_driver(
    policy: spec.DeployPolicy, host_version: DriverVersion | None, payload_version: str | None
) -> DriverChoice:
    """Table 3.5. ``host_version`` is the host's installed ``metax`` driver (None or empty when absent).

    Raises MetaxError when the policy needs the payload and ``payload_version`` is missing.
    """
    host = host_version.strip() if host_version and host_version.strip() else None
    if policy is spec.DeployPolicy.NEVER:
        return DriverChoice(
            DriverSource.UNMANAGED, host, "deployPolicy Never: the operator does not manage the kernel driver"
        )
    if policy is spec.DeployPolicy.PREFER_CLOUD:
        payload = _need_payload(policy, payload_version)
        return DriverChoice(DriverSource.PAYLOAD, payload, f"deployPolicy PreferCloud: payload driver {payload}")
    if policy is spec.DeployPolicy.PREFER_HOST:
        if host is not None:
            return DriverChoice(DriverSource.HOST, host, f"deployPolicy PreferHost: host driver {host} is installed")
        payload = _need_payload(policy, payload_version)
        return DriverChoice(
            DriverSource.PAYLOAD, payload, f"deployPolicy PreferHost: no host driver, using payload driver {payload}"
        )
    # PreferNewer
    payload = _need_payload(policy, payload_version)
    if host is None:
        return DriverChoice(
            DriverSource.PAYLOAD, payload, f"deployPolicy PreferNewer: no host driver, using payload driver {payload}"
        )
    host_parsed = _parse_loose(host)
    if host_parsed is None:
        return DriverChoice(
            DriverSource.PAYLOAD,
            payload,
            f"deployPolicy PreferNewer: host driver version {host!r} is not a version number, "
            f"so it cannot be compared; using payload driver {payload}",
        )
    payload_parsed = _parse_loose(payload)
    if payload_parsed is None:
        return DriverChoice(
            DriverSource.PAYLOAD,
            payload,
            f"deployPolicy PreferNewer: payload version {payload!r} is not a version number, "
            f"so it cannot be compared; using payload driver {payload}",
        )
    if _key(host_parsed) > _key(payload_parsed):
        return DriverChoice(
            DriverSource.HOST,
            host,
            f"deployPolicy PreferNewer: host driver {host} is newer than payload driver {payload}",
        )
    relation = "the same as" if _key(host_parsed) == _key(payload_parsed) else "older than"
    return DriverChoice(
        DriverSource.PAYLOAD,
        payload,
        f"deployPolicy PreferNewer: host driver {host} is {relation} payload driver {payload}; using the payload",
    )


# ---------------------------------------------------------------------------------------------------------
# R-FW


class FirmwareOutcome(enum.Enum):
    UPGRADE = "upgrade"
    """Flash ``targets`` with ``image``; on success emit NodeNeedReboot."""
    SKIP = "skip"
    """Nothing to do (policy Never, no GPU, everything current): not a problem."""
    REFUSE = "refuse"
    """The node breaks a §3.2.9 rule: nothing is flashed and ``reason`` says what to fix."""


class FirmwareImage(enum.Enum):
    """Which build of the payload firmware to flash (Table 3.18, ``driver.fwEnableVirt``)."""

    VIRT = "virt"
    NON_VIRT = "non-virt"


@attrs.frozen
class FirmwareDecision:
    outcome: FirmwareOutcome
    reason: str
    image: FirmwareImage | None = None
    """Set for UPGRADE."""
    targets: tuple[PciAddress, ...] = ()
    """PFs to flash, in PCI address order (UPGRADE only)."""
    current: tuple[PciAddress, ...] = ()
    """PFs already at the payload version and build: skipped."""
    newer: tuple[PciAddress, ...] = ()
    """PFs whose VBIOS is newer than the payload's: never downgraded, skipped."""


def _refuse(reason: str) -> FirmwareDecision:
    return FirmwareDecision(FirmwareOutcome.REFUSE, reason)


def _listing(items: Sequence[tuple[PciAddress, str]]) -> str:
    return ", ".join(f"{address} ({version})" for address, version in items)


def firmware_decision(
    policy: spec.FirmwarePolicy,
    enable_virt: bool,
    is_physical_machine: bool,
    firmware: Sequence[FirmwareInfo],
    functions: Sequence[PciFunction],
    payload_vbios: str | None,
    *,
    multi_host_interconnect: bool = False,
) -> FirmwareDecision:
    """§3.2.9 / Tables 3.17–3.18: flash the payload firmware on this node's PFs, skip, or refuse with a reason.

    ``firmware`` holds one record per PF (records of VFs are ignored); ``payload_vbios`` is the VBIOS version
    the payload's firmware images carry. ``multi_host_interconnect`` is true when the node's GPUs are linked
    to GPUs of other hosts, which §3.2.9 does not support.
    """
    if policy is spec.FirmwarePolicy.NEVER:
        return FirmwareDecision(FirmwareOutcome.SKIP, "fwUpgradePolicy is Never: firmware is not upgraded")
    if not is_physical_machine:
        return _refuse("firmware can only be upgraded on a physical machine; this node is a virtual machine")
    pfs = sorted((f for f in functions if f.kind is FunctionKind.PF), key=lambda f: f.address)
    if not pfs:
        if functions:
            return _refuse(
                "only physical functions (PFs) can be flashed, and this node sees only virtual functions (VFs); "
                "upgrade the firmware on the host that owns the PFs"
            )
        return FirmwareDecision(FirmwareOutcome.SKIP, "no MetaX GPU on this node")
    if multi_host_interconnect:
        return _refuse("firmware upgrade does not support GPUs interconnected across hosts (§3.2.9)")
    if not payload_vbios or not payload_vbios.strip():
        return _refuse("the driver payload does not say which firmware version it carries; nothing can be flashed")
    target = _parse_loose(payload_vbios)
    if target is None:
        return _refuse(f"the payload firmware version {payload_vbios!r} is not a version number")

    info = {fw.address: fw for fw in firmware}
    missing = [f.address for f in pfs if f.address not in info]
    if missing:
        return _refuse(f"no VBIOS version reported for {', '.join(missing)}; cannot decide safely")
    parsed: dict[PciAddress, versions.Version] = {}
    unparseable = []
    for f in pfs:
        version = _parse_loose(info[f.address].vbios_version)
        if version is None:
            unparseable.append((f.address, repr(info[f.address].vbios_version)))
        else:
            parsed[f.address] = version
    if unparseable:
        return _refuse(f"VBIOS version is not a version number on {_listing(unparseable)}")

    below = [(f.address, str(parsed[f.address])) for f in pfs if parsed[f.address] < VBIOS_BOUNDARY]
    above = [(f.address, str(parsed[f.address])) for f in pfs if parsed[f.address] >= VBIOS_BOUNDARY]
    if below and above:
        return _refuse(
            f"the GPUs of this node are on both sides of VBIOS {VBIOS_BOUNDARY}: below it {_listing(below)}; "
            f"at or above it {_listing(above)}. Bring every GPU to the same side first "
            f"(preferably {VBIOS_BOUNDARY} or later)"
        )

    if enable_virt:
        non_virt = [(f.address, info[f.address].vbios_version) for f in pfs if not info[f.address].virtualization]
        if non_virt:
            return _refuse(
                f"fwEnableVirt is true but {_listing(non_virt)} run non-virtualisation firmware: switching to "
                "virtualisation firmware is not automatic, because it needs a manual confirmation that this "
                "server model supports it. Flash it by hand after checking, or set driver.fwEnableVirt: false"
            )

    image = FirmwareImage.VIRT if enable_virt else FirmwareImage.NON_VIRT
    targets: list[PciAddress] = []
    current: list[PciAddress] = []
    newer: list[PciAddress] = []
    for f in pfs:
        have, want = _key(parsed[f.address]), _key(target)
        if have > want:
            newer.append(f.address)
        elif have == want and info[f.address].virtualization == enable_virt:
            current.append(f.address)
        else:
            targets.append(f.address)
    note = f"; {len(newer)} GPU(s) newer than the payload are not downgraded" if newer else ""
    if not targets:
        return FirmwareDecision(
            FirmwareOutcome.SKIP,
            f"every GPU already runs firmware {payload_vbios.strip()} or newer{note}",
            current=tuple(current),
            newer=tuple(newer),
        )
    return FirmwareDecision(
        FirmwareOutcome.UPGRADE,
        f"flash {image.value} firmware {payload_vbios.strip()} on {', '.join(targets)}{note}",
        image=image,
        targets=tuple(targets),
        current=tuple(current),
        newer=tuple(newer),
    )


FIRMWARE_FIELDS: tuple[tuple[str, str], ...] = (
    ("driver.fwUpgradePolicy", "fw_upgrade_policy"),
    ("driver.fwEnableVirt", "fw_enable_virt"),
    ("driver.payload.name", "payload.name"),
    ("driver.payload.version", "payload.version"),
    ("driver.payload.registry", "payload.registry"),
)
"""Spec fields that decide what gets flashed: locked while any node is flashing (the payload supplies the
firmware image, so changing it mid-flash would change the firmware of the GPUs not yet flashed)."""


def _get(driver: spec.Driver, dotted: str) -> object:
    value: object = driver
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def changed_firmware_fields(old: spec.Driver, new: spec.Driver) -> tuple[str, ...]:
    """Paths of the firmware-deciding fields that differ between ``old`` and ``new``."""
    return tuple(path for path, attr in FIRMWARE_FIELDS if _get(old, attr) != _get(new, attr))


def firmware_edit_errors(
    old: spec.Driver, new: spec.Driver, flashing_nodes: Collection[str] | None
) -> list[FieldError]:
    """R-FW "no parameter changes while upgrading": one error per changed firmware field while flashing.

    The webhook refuses the edit with these errors; the driver-manager of a flashing node, if it sees a
    change anyway (webhook down), finishes the flash with the parameters it started with. ``flashing_nodes``
    None: the cluster cannot say which nodes flash, so the firmware fields stay as they are (the edit can be
    retried).
    """
    if flashing_nodes is not None and not flashing_nodes:
        return []
    if flashing_nodes is None:
        why = "cannot be changed now: the webhook cannot tell whether firmware is being flashed; try again"
    else:
        nodes = ", ".join(sorted(flashing_nodes))
        why = (
            f"cannot be changed while firmware is being flashed (nodes: {nodes}); "
            "wait for the NodeNeedReboot events, then change it"
        )
    return [FieldError(path, why) for path in changed_firmware_fields(old, new)]


def firmware_params_locked(old: spec.Driver, new: spec.Driver, flashing_nodes: Collection[str]) -> bool:
    """True when the edit from ``old`` to ``new`` must be refused because firmware is being flashed."""
    return bool(firmware_edit_errors(old, new, flashing_nodes))
