"""driver-manager's decisions (`metax_core.node.driver_plan`): the step per deploy policy and loaded module,
parameter changes, readiness only when loaded as asked and every GPU answers, and pending firmware."""

from __future__ import annotations

import pytest

from metax_core.errors import MetaxError
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import DriverVersion, GpuHealth, ModuleState, PciAddress, PciFunction
from metax_core.node import driver_config, driver_plan
from metax_core.node.driver_plan import Step
from metax_core.spec import model as spec

P = spec.DeployPolicy
NONE = driver_config.NodeDriverConfig(0, {})


def loaded(version: str, **params: str) -> ModuleState:
    return ModuleState("metax", DriverVersion(version), params)


def pf(n: int, driver: str | None = "metax") -> PciFunction:
    return PciFunction(address=PciAddress(f"0000:0{n}:00.0"), vendor_id=0x9999, device_id=0x4000, driver=driver)


@pytest.mark.parametrize(
    ("policy", "host", "module", "step", "version"),
    [
        (P.PREFER_CLOUD, "2.18.0", None, Step.LOAD, "2.20.0"),
        (P.PREFER_CLOUD, "2.18.0", loaded("2.18.0"), Step.RELOAD, "2.20.0"),
        (P.PREFER_CLOUD, None, loaded("2.20"), Step.KEEP, "2.20.0"),
        (P.PREFER_HOST, "2.18.0", loaded("2.18.0"), Step.KEEP, "2.18.0"),
        (P.PREFER_HOST, None, None, Step.LOAD, "2.20.0"),
        (P.PREFER_NEWER, "2.30.0", loaded("2.20.0"), Step.RELOAD, "2.30.0"),
        (P.PREFER_NEWER, "2.10.0", None, Step.LOAD, "2.20.0"),
        (P.NEVER, "2.18.0", None, Step.LEAVE, "2.18.0"),
        (P.NEVER, None, loaded("1.0"), Step.LEAVE, None),
    ],
)
def test_step_per_policy_and_loaded_module(
    policy: spec.DeployPolicy, host: str | None, module: ModuleState | None, step: Step, version: str | None
) -> None:
    host_version = DriverVersion(host) if host else None
    plan = driver_plan.plan_driver(policy, "2.20.0", host_version, module, NONE)
    assert (plan.step, plan.choice.version) == (step, version)
    assert plan.reason


def test_payload_module_file_only_for_the_payload() -> None:
    plan = driver_plan.plan_driver(P.PREFER_CLOUD, "2.20.0", None, None, NONE)
    assert plan.module_file("6.1.0-57-amd64") == "/var/lib/metax/drivers/2.20.0/6.1.0-57-amd64/metax.ko"
    host = driver_plan.plan_driver(P.PREFER_HOST, "2.20.0", DriverVersion("2.1"), None, NONE)
    assert host.module_file("6.1.0-57-amd64") is None and not host.from_payload


def test_parameter_change_and_removal_reload() -> None:
    wanted = driver_config.NodeDriverConfig(0, {"xcore_page_size": "12"})
    plan = driver_plan.plan_driver(P.PREFER_CLOUD, "2.20.0", None, loaded("2.20.0", xcore_page_size="10"), wanted)
    assert (plan.step, plan.changed_params) == (Step.RELOAD, ("xcore_page_size",))
    removed = driver_plan.plan_driver(
        P.PREFER_CLOUD, "2.20.0", None, loaded("2.20.0", xcore_page_size="10"), NONE, {"xcore_page_size": "10"}
    )
    assert removed.step is Step.RELOAD


def test_payload_version_required_unless_never() -> None:
    with pytest.raises(MetaxError, match=r"driver\.payload\.version is required"):
        driver_plan.plan_driver(P.PREFER_CLOUD, None, None, None, NONE)


def test_ready_only_when_loaded_as_asked_and_every_gpu_answers() -> None:
    plan = driver_plan.plan_driver(P.PREFER_CLOUD, "2.20.0", None, None, NONE)
    gpus = [pf(1), pf(2), pf(3, driver="vfio-pci")]
    healthy = {g.address: GpuHealth(g.address) for g in gpus[:2]}
    assert not driver_plan.driver_readiness(plan, None, gpus, healthy).ready
    assert not driver_plan.driver_readiness(plan, loaded("2.18.0"), gpus, healthy).ready
    ok = driver_plan.driver_readiness(plan, loaded("2.20.0"), gpus, healthy)
    assert ok.ready and ok.version == "2.20.0" and "2 GPU(s)" in ok.reason
    sick = {**healthy, gpus[1].address: GpuHealth(gpus[1].address, (Fault(FaultKind.STATE, "fell off the bus"),))}
    unready = driver_plan.driver_readiness(plan, loaded("2.20.0"), gpus, sick)
    assert "0000:02:00.0 (StateFault: fell off the bus)" in unready.reason
    assert "health check failed" in driver_plan.driver_readiness(plan, loaded("2.20.0"), gpus, None).reason


def test_same_version_ignores_trailing_zeros() -> None:
    assert driver_plan.same_version("2.18", "2.18.0")
    assert not driver_plan.same_version("2.18.1", "2.18.0")
    assert driver_plan.same_version("dev", "dev") and not driver_plan.same_version(None, "1")


def test_firmware_pending_until_the_flashed_version_runs() -> None:
    a, b = PciAddress("0000:01:00.0"), PciAddress("0000:02:00.0")
    flashed = {a: "1.14.0.0", b: "1.14.0.0"}
    assert driver_plan.firmware_pending(flashed, {a: "1.13.0.0", b: "1.14"}) == (a,)


def test_the_running_driver_is_recorded_as_it_was_loaded() -> None:
    with_vfs = [
        PciFunction(PciAddress("0000:01:00.0"), 0x9999, 0x4000, driver="metax", sriov_totalvfs=16, sriov_numvfs=2),
        PciFunction(PciAddress("0000:02:00.0"), 0x9999, 0x4000, driver="metax", sriov_totalvfs=16),
    ]
    module = loaded("2.20.0", xcore_page_size="11", gpu_model="(null)")
    ours = driver_plan.running_driver(
        module, with_vfs, our_params={"xcore_page_size": "11"}, our_file="/f/2.20.0/metax.ko", our_version="2.20"
    )
    assert ours == driver_plan.RunningDriver(
        "2.20.0", {"xcore_page_size": "11"}, "/f/2.20.0/metax.ko", {"0000:01:00.0": 2}
    )
    assert ours.describe() == "metax 2.20.0 with xcore_page_size=11 and 2 VF(s)"
    host = driver_plan.running_driver(module, with_vfs, our_params={"a": "1"}, our_file="/x", our_version="2.18.0")
    assert (host.params, host.module_file) == ({"xcore_page_size": "11"}, None)  # not ours: sysfs, modprobe
    staged = driver_plan.running_driver(
        module,
        (),
        our_params=None,
        our_file=None,
        our_version=None,
        staged_file="/var/lib/metax/drivers/2.20.0/metax.ko",
    )
    assert staged.module_file == "/var/lib/metax/drivers/2.20.0/metax.ko" and staged.vf_counts == {}


def test_a_failed_load_never_leaves_the_node_driverless_when_it_can_help_it() -> None:
    previous = driver_plan.RunningDriver("2.20.0", {}, None)
    assert driver_plan.after_failed_load(loaded("2.20.0"), previous) is driver_plan.AfterFailedLoad.KEEP
    assert driver_plan.after_failed_load(None, previous) is driver_plan.AfterFailedLoad.RESTORE
    assert driver_plan.after_failed_load(None, None) is driver_plan.AfterFailedLoad.NOTHING
    reason = driver_plan.restored_readiness("2.21.0", "Invalid module format", previous)
    assert (
        reason == "metax 2.21.0 failed to load (Invalid module format); "
        "restored the previous metax 2.20.0 with no parameters and 0 VF(s)"
    )
