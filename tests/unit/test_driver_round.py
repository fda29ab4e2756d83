"""driver-manager's round decisions beside the plan (`driver_plan.needs_host_driver`, `driver_plan.round_readiness`):
which deploy policies read the host's installed driver, and how a blocked load or a refused VF count overrides
the readiness the loaded module and the GPUs' health give (R-READY for ``driver``, R-VF)."""

from __future__ import annotations

import pytest

from metax_core.inventory import PciAddress
from metax_core.node import driver_config, driver_plan
from metax_core.spec import model as spec

READY = driver_plan.DriverReadiness(True, "metax 2.20.0 loaded, 2 GPU(s) answer", "2.20.0")
REFUSED = driver_config.VfCountPlan(driver_config.PlanOutcome.REFUSE, 4, problems=("0000:01:00.0 takes at most 2",))
APPLIED = driver_config.VfCountPlan(
    driver_config.PlanOutcome.APPLY, 4, writes=(driver_config.PfWrite(PciAddress("0000:01:00.0"), 0, 4),)
)


@pytest.mark.parametrize(
    ("policy", "reads_host"),
    [
        (spec.DeployPolicy.PREFER_HOST, True),
        (spec.DeployPolicy.PREFER_NEWER, True),
        (spec.DeployPolicy.PREFER_CLOUD, False),
        (spec.DeployPolicy.NEVER, False),
    ],
)
def test_only_the_policies_that_weigh_the_host_driver_read_it(policy: spec.DeployPolicy, reads_host: bool) -> None:
    assert driver_plan.needs_host_driver(policy) is reads_host


def test_every_policy_is_answered() -> None:
    assert {p for p in spec.DeployPolicy if driver_plan.needs_host_driver(p)} == {
        spec.DeployPolicy.PREFER_HOST,
        spec.DeployPolicy.PREFER_NEWER,
    }


def test_a_round_that_did_all_it_had_to_keeps_what_was_found() -> None:
    assert driver_plan.round_readiness(READY, blocked=None, vf_plan=None) is READY
    assert driver_plan.round_readiness(READY, blocked=None, vf_plan=APPLIED) is READY


def test_a_blocked_load_is_not_ready_and_says_why() -> None:
    got = driver_plan.round_readiness(READY, blocked="cannot unload metax 2.18.0", vf_plan=APPLIED)
    assert got == driver_plan.DriverReadiness(False, "cannot unload metax 2.18.0", "2.20.0")


def test_a_blocked_load_wins_over_a_refused_vf_count() -> None:
    got = driver_plan.round_readiness(READY, blocked="kernel not covered", vf_plan=REFUSED)
    assert (got.ready, got.reason) == (False, "kernel not covered")


def test_a_refused_vf_count_is_not_ready_and_names_the_problems() -> None:
    got = driver_plan.round_readiness(READY, blocked=None, vf_plan=REFUSED)
    assert got == driver_plan.DriverReadiness(False, "VF count refused: 0000:01:00.0 takes at most 2")
