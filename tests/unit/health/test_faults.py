"""The fault kinds, their severities, and how a reading's words and numbers become faults (R-HEALTH)."""

from __future__ import annotations

import pytest

from metax_core.health import faults
from metax_core.health.faults import Fault, FaultKind, PcieLink, Severity


def test_every_kind_has_a_severity_and_a_name_that_reads_back() -> None:
    for kind in FaultKind:
        assert kind.severity in (Severity.DEGRADED, Severity.UNUSABLE)
        assert FaultKind.from_name(kind.value) is kind
    with pytest.raises(ValueError, match="fault kind 'Ecc' is not one of FellOffBus, NoDriver"):
        FaultKind.from_name("Ecc")


def test_the_worst_fault_decides() -> None:
    assert faults.worst([]) is Severity.FINE
    hot = Fault(FaultKind.THERMAL, "hot")
    gone = Fault(FaultKind.FELL_OFF_BUS)
    assert faults.worst([hot]) is Severity.DEGRADED
    assert faults.worst([hot, gone]) is Severity.UNUSABLE
    assert Severity.from_word("unusable") is Severity.UNUSABLE
    with pytest.raises(ValueError, match="severity 'bad' is not one of fine, degraded, unusable"):
        Severity.from_word("bad")


@pytest.mark.parametrize("state", ["Unavailable", "Error", "GPU hang", "Reset pending", "Lost", "N/A"])
def test_bad_tool_states_are_state_faults(state: str) -> None:
    fault = faults.state_fault(state)
    assert fault is not None and fault.kind is FaultKind.STATE and state in fault.detail


@pytest.mark.parametrize("state", ["Available", "", "Normal"])
def test_good_tool_states_are_no_fault(state: str) -> None:
    assert faults.state_fault(state) is None


def test_temperature_at_the_limit_is_thermal_below_is_not() -> None:
    assert faults.reading_faults(94.9, None, None) == ()
    (fault,) = faults.reading_faults(95.0, None, None)
    assert fault.kind is FaultKind.THERMAL and "95 °C" in fault.detail
    assert faults.reading_faults(None, None, None) == ()


def test_power_at_its_limit_is_fine_well_above_is_degraded() -> None:
    assert faults.reading_faults(None, 350_000, 350_000) == ()  # throttling at the cap is by design
    assert faults.reading_faults(None, 367_000, 350_000) == ()  # within the tolerance
    (fault,) = faults.reading_faults(None, 380_000, 350_000)
    assert fault.kind is FaultKind.POWER and fault.detail == "board power 380 W, limit 350 W"
    assert faults.reading_faults(None, 380_000, 0) == ()  # no limit reported


def test_a_link_below_its_maximum_is_degraded() -> None:
    full = PcieLink("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
    assert faults.link_fault(full) is None
    slow = faults.link_fault(PcieLink("8.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16))
    assert slow == Fault(FaultKind.LINK, "PCIe link speed 8 GT/s of 32 GT/s, width x8 of x16")
    assert faults.link_fault(PcieLink("Unknown", 16, "32.0 GT/s PCIe", 16)) is None
    assert faults.link_fault(PcieLink()) is None  # a VF, a virtual machine: no link files
    assert faults.link_fault(PcieLink("32.0 GT/s PCIe", 0, "32.0 GT/s PCIe", 16)) is None  # link down: 0
