"""The hardware adapter on a real Linux kernel (issue 15): each in-guest case is one test result here.

Aspects covered (all inside one QEMU boot of Debian's stock kernel, through `metax_hw` on the guest's sysfs,
against QEMU's SR-IOV NVMe controller): VF counts 0 -> 2 -> 3 -> 0 through zero, the kernel's EBUSY/ERANGE
rules for ``sriov_numvfs``, refusal above ``sriov_totalvfs``, a VF to vfio-pci and back with its
``/dev/vfio/<group>``, whole IOMMU groups, modprobe/modinfo/rmmod of vfio-pci with a parameter read back from
``/sys/module``, a process killed between two writes of a bind converging on the next run, and the topology document
(C7) built from the PF's real PCIe path and NUMA node. The same
cases run on the fake host in tests/contract/hardware/test_kernel_cases.py.
"""

from __future__ import annotations

import pytest

from tests.realkernel import hwcases, payloadcases
from tests.realkernel.results import GuestRun

pytestmark = [pytest.mark.realkernel, pytest.mark.slow]


def test_the_guest_ran_every_case_and_powered_off(guest_run: GuestRun) -> None:
    assert guest_run.first("done") is True, f"the guest program did not finish; console:\n{guest_run.tail()}"
    assert guest_run.first("exit") == 0, f"the guest program failed; console:\n{guest_run.tail()}"
    assert guest_run.boot.exit_code == 0, f"QEMU exited with {guest_run.boot.exit_code}:\n{guest_run.tail()}"
    assert list(guest_run.cases) == list(hwcases.CASES)


def test_the_guest_saw_an_sriov_pf_with_per_vf_iommu_groups(guest_run: GuestRun) -> None:
    facts = guest_run.first("facts")
    assert facts is not None, f"no facts reported: {guest_run.first('facts_error')}\n{guest_run.tail()}"
    assert int(facts["sriov"]["sriov_totalvfs"]) >= 2
    groups = facts["iommu_groups"]
    assert len(groups) == 3 and len(set(groups.values())) == 3, groups


@pytest.mark.parametrize("case", list(hwcases.CASES))
def test_case_passes_on_a_real_kernel(case: str, guest_run: GuestRun) -> None:
    result = guest_run.cases.get(case)
    assert result is not None, f"the guest reported nothing for {case}; console:\n{guest_run.tail()}"
    assert result["ok"], f"{case} failed on the real kernel: {result['message']}"


@pytest.mark.parametrize("case", list(payloadcases.CASES))
def test_driver_manager_payload_case_on_a_real_kernel(case: str, guest_run: GuestRun) -> None:
    """issue 21 item 5: driver-manager loads the booted kernel's module from a real payload and refuses one
    built for another kernel (`tests.realkernel.payloadcases`)."""
    assert guest_run.payload_error is None, guest_run.payload_error
    result = guest_run.payload_cases.get(case)
    assert result is not None, f"the guest reported nothing for {case}; console:\n{guest_run.tail()}"
    assert result["ok"], f"{case} failed on the real kernel: {result['message']}"
