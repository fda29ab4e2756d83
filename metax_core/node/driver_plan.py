"""What driver-manager does on its node this round (R-DRIVER, R-MODPARAM, R-READY for ``driver``).

`policy.choose_driver` says which driver a node should run (Table 3.5); this module turns that choice and
the node's facts (the loaded module, the wanted parameters, what was applied last) into one step — keep,
load, or reload — and says when the driver counts as ready. Keeping it pure means the whole policy table,
"a module loaded with other parameters is reloaded" and "Never leaves the kernel alone" are unit-tested
without a node, and driver-manager only gathers facts and carries the step out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from metax_core import versions
from metax_core.inventory import (
    VFIO_DRIVER,
    DriverVersion,
    FunctionKind,
    GpuHealth,
    ModuleState,
    PciAddress,
    PciFunction,
)
from metax_core.node import driver_config, payload_layout, policy
from metax_core.spec import model as spec
from metax_core.wire import event_reasons

HOST_DRIVER_DIR = payload_layout.HOST_DRIVER_DIR
"""Where payload drivers are copied on the host, per version and kernel release (docs/agents.md)."""
HOST_FIRMWARE_DIR = "/lib/firmware/metax"
"""Where payload firmware images are copied on the host before flashing."""

HOST_DRIVER_IN_USE = event_reasons.HOST_DRIVER_IN_USE
"""Event reason: the loaded driver cannot be unloaded (processes use the GPUs, or it is built in)."""
DRIVER_LOAD_FAILED = event_reasons.DRIVER_LOAD_FAILED
DRIVER_READY = event_reasons.DRIVER_READY
PREVIOUS_DRIVER_RESTORED = event_reasons.PREVIOUS_DRIVER_RESTORED
DRIVER_RESTORE_FAILED = event_reasons.DRIVER_RESTORE_FAILED
FIRMWARE_REFUSED = event_reasons.FIRMWARE_UPGRADE_REFUSED
FIRMWARE_FAILED = event_reasons.FIRMWARE_UPGRADE_FAILED


class Step(enum.Enum):
    KEEP = "keep"
    """The right module is loaded with the right parameters."""
    LOAD = "load"
    """Nothing is loaded: load the chosen driver."""
    RELOAD = "reload"
    """Another version or other parameters are loaded: unload, then load the chosen driver."""
    LEAVE = "leave"
    """deployPolicy Never: the kernel is not touched."""


@attrs.frozen
class DriverPlan:
    choice: policy.DriverChoice
    step: Step
    params: Mapping[str, str]
    """Module parameters to load with (driver-config, node entry wins whole)."""
    reason: str
    changed_params: tuple[str, ...] = ()

    @property
    def from_payload(self) -> bool:
        return self.choice.source is policy.DriverSource.PAYLOAD and self.choice.version is not None

    def module_file(self, release: str) -> str | None:
        """Host-absolute path of the payload's module file for kernel ``release`` (PAYLOAD only)."""
        if not self.from_payload or self.choice.version is None:
            return None
        return payload_module_path(self.choice.version, release)


def payload_module_path(version: str, release: str) -> str:
    return payload_layout.host_module_path(version, release)


def same_version(a: str | None, b: str | None) -> bool:
    """``2.18`` and ``2.18.0`` are one driver; text that is no version number compares as text."""
    if a is None or b is None:
        return a == b
    pa, pb = versions.try_parse(a.strip()), versions.try_parse(b.strip())
    if pa is None or pb is None:
        return a.strip() == b.strip()

    def key(v: versions.Version) -> tuple[int, ...]:
        numbers = list(v.numbers)
        while numbers and numbers[-1] == 0:
            numbers.pop()
        return tuple(numbers)

    return key(pa) == key(pb)


def plan_driver(
    deploy_policy: spec.DeployPolicy,
    payload_version: str | None,
    host_installed: DriverVersion | None,
    loaded: ModuleState | None,
    wanted: driver_config.NodeDriverConfig,
    previously_applied: Mapping[str, str] | None = None,
) -> DriverPlan:
    """The step that makes the node run the driver Table 3.5 chooses, with driver-config's parameters.

    Raises MetaxError (from `policy.choose_driver`) when the policy needs a payload version and none is set.
    """
    choice = policy.choose_driver(deploy_policy, host_installed, payload_version)
    params = dict(wanted.module_params)
    if choice.source is policy.DriverSource.UNMANAGED:
        return DriverPlan(choice, Step.LEAVE, params, choice.reason)
    if loaded is None:
        return DriverPlan(choice, Step.LOAD, params, f"metax is not loaded: {choice.reason}")
    if not same_version(loaded.version, choice.version):
        return DriverPlan(
            choice,
            Step.RELOAD,
            params,
            f"metax {loaded.version or '(unknown version)'} is loaded, {choice.version} is wanted: {choice.reason}",
        )
    decision = driver_config.module_params_decision(params, loaded, previously_applied)
    if decision.action is driver_config.ModuleAction.RELOAD:
        return DriverPlan(
            choice,
            Step.RELOAD,
            params,
            f"module parameters changed ({', '.join(decision.changed)}): reload metax {choice.version}",
            decision.changed,
        )
    return DriverPlan(choice, Step.KEEP, params, f"metax {choice.version} loaded as wanted")


@attrs.frozen
class DriverReadiness:
    ready: bool
    reason: str
    version: str | None = None


def driver_readiness(
    plan: DriverPlan,
    loaded: ModuleState | None,
    functions: Sequence[PciFunction],
    health: Mapping[PciAddress, GpuHealth] | None,
) -> DriverReadiness:
    """``driver`` is ready when the chosen module is loaded (its parameters as asked) and every GPU answers.

    Every PF not given to vfio-pci must be healthy in ``health`` (None: the health check itself failed).
    With deployPolicy Never the host's own driver counts, whatever its version.
    """
    if loaded is None:
        why = (
            "deployPolicy Never and the host has no metax module loaded"
            if plan.step is Step.LEAVE
            else "metax is not loaded"
        )
        return DriverReadiness(False, why)
    version = str(loaded.version) if loaded.version else None
    if plan.step is not Step.LEAVE:
        if not same_version(version, plan.choice.version):
            return DriverReadiness(False, f"metax {version} is loaded, {plan.choice.version} is wanted")
        wrong = [k for k, v in plan.params.items() if loaded.params.get(k, "").strip() != v]
        if wrong:
            return DriverReadiness(False, f"module parameters not as asked: {', '.join(sorted(wrong))}")
    gpus = [f for f in functions if f.kind is FunctionKind.PF and f.driver != VFIO_DRIVER]
    if health is None:
        return DriverReadiness(False, "the GPU health check failed (mx-smi did not answer)", version)
    silent = [
        f"{f.address} ({health[f.address].reason})" if f.address in health else f"{f.address} (no answer)"
        for f in gpus
        if f.address not in health or not health[f.address].healthy
    ]
    if silent:
        return DriverReadiness(False, f"GPUs not answering: {', '.join(silent)}", version)
    return DriverReadiness(True, f"metax {version} loaded, {len(gpus)} GPU(s) answer", version)


@attrs.frozen
class RunningDriver:
    """A loaded driver as driver-manager can load it again: recorded before it unloads it for a reload."""

    version: str | None
    params: Mapping[str, str]
    """The parameters to load it with again."""
    module_file: str | None
    """Host-absolute module file driver-manager loaded it from; None: the host's own, through modprobe."""
    vf_counts: Mapping[str, int] = attrs.field(factory=dict)
    """PF address → sriov_numvfs before the unload (only PFs that had VFs)."""

    def describe(self) -> str:
        vfs = sum(self.vf_counts.values())
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items())) or "no parameters"
        return f"metax {self.version or '(unknown version)'} with {params} and {vfs} VF(s)"


def running_driver(
    loaded: ModuleState,
    functions: Sequence[PciFunction],
    *,
    our_params: Mapping[str, str] | None,
    our_file: str | None,
    our_version: str | None,
    staged_file: str | None = None,
) -> RunningDriver:
    """What to restore if the driver about to be unloaded cannot be replaced.

    When driver-manager loaded it itself (``our_version`` is its version), the same file and the parameters
    it gave. Otherwise the parameters sysfs shows (those a module prints as ``(null)`` were not set and are
    left out), from ``staged_file`` (a payload copy of that version already on the host) or else the host's
    own module through modprobe.
    """
    ours = our_version is not None and same_version(loaded.version, our_version)
    if ours and our_params is not None:
        params: Mapping[str, str] = dict(our_params)
    else:
        params = {k: v for k, v in loaded.params.items() if v.strip() not in ("", "(null)")}
    vfs = {str(f.address): f.sriov_numvfs for f in functions if f.kind is FunctionKind.PF and f.sriov_numvfs > 0}
    version = str(loaded.version) if loaded.version else None
    return RunningDriver(version, params, our_file if ours else staged_file, vfs)


class AfterFailedLoad(enum.Enum):
    KEEP = "keep"
    """The running driver was never unloaded: the node keeps it."""
    RESTORE = "restore"
    """The old driver was unloaded and the new one refused: load the recorded previous driver again."""
    NOTHING = "nothing"
    """Nothing was loaded before (or nothing is known of it): the node stays without a driver."""


def after_failed_load(loaded_now: ModuleState | None, previous: RunningDriver | None) -> AfterFailedLoad:
    """What driver-manager does when loading the chosen driver failed: never leave the node driverless."""
    if loaded_now is not None:
        return AfterFailedLoad.KEEP
    if previous is None:
        return AfterFailedLoad.NOTHING
    return AfterFailedLoad.RESTORE


def restored_readiness(wanted: str | None, failure: str, previous: RunningDriver) -> str:
    """The readiness reason while the previous driver runs because the wanted one does not load."""
    return f"metax {wanted} failed to load ({failure}); restored the previous {previous.describe()}"


def firmware_pending(flashed: Mapping[str, str], running: Mapping[PciAddress, str]) -> tuple[PciAddress, ...]:
    """GPUs flashed with a version they do not run yet (a reboot is due): never flashed again before it."""
    return tuple(
        sorted(
            PciAddress(a) for a, v in flashed.items() if a in running and not same_version(running[PciAddress(a)], v)
        )
    )


def needs_host_driver(deploy_policy: spec.DeployPolicy) -> bool:
    """Whether the plan must know the host's installed driver version: only the policies that weigh it
    (PreferHost takes it, PreferNewer compares it); the others never ask the host's module tools for it."""
    return deploy_policy in (spec.DeployPolicy.PREFER_HOST, spec.DeployPolicy.PREFER_NEWER)


def round_readiness(
    found: DriverReadiness, *, blocked: str | None, vf_plan: driver_config.VfCountPlan | None
) -> DriverReadiness:
    """The ``driver`` signal of a round: what `driver_readiness` found, unless the round could not do what it
    had to. A blocked load (the host's driver in use, a kernel the payload does not cover, a failed load) says
    why, whatever is loaded; a refused VF count is not ready either (gpu-device must not offer a node whose
    GPUs are not alike, R-VF). The version is published only with a ready signal, so either way none is."""
    if blocked is not None:
        return DriverReadiness(False, blocked, found.version)
    if vf_plan is not None and vf_plan.outcome is driver_config.PlanOutcome.REFUSE:
        return DriverReadiness(False, "VF count refused: " + "; ".join(vf_plan.problems))
    return found
