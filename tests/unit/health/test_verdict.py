"""The verdict machine (R-HEALTH, docs/health.md "Verdict rules"): every fault kind, flapping readings, unknown
readings, VFs following their PF."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from metax_core.health import verdict
from metax_core.health.faults import Fault, FaultKind, Severity
from metax_core.inventory import FunctionKind, GpuHealth, PciAddress, PciFunction

A, B = PciAddress("0000:09:00.0"), PciAddress("0000:0a:00.0")
VF = PciAddress("0000:09:00.1")
RULES = verdict.Rules(fail_after=2, clear_after=2, unknown_grace=30.0, recheck=0.5)


def reading(**faults: Sequence[Fault]) -> dict[PciAddress, GpuHealth]:
    by = {"a": A, "b": B}
    out = {a: GpuHealth(a) for a in (A, B)}
    for key, found in faults.items():
        out[by[key]] = GpuHealth(by[key], tuple(found))
    return out


def run(readings: Sequence[Mapping[PciAddress, GpuHealth] | None], start: float = 0.0) -> list[verdict.Step]:
    board, steps = verdict.Board(), []
    for i, r in enumerate(readings):
        step = verdict.step(board, [A, B], r, start + 5.0 * i, RULES, failure="mx-smi timed out")
        steps.append(step)
        board = step.board
    return steps


@pytest.mark.parametrize("kind", [k for k in FaultKind if k is not FaultKind.HEALTH_UNKNOWN])
def test_every_fault_kind_is_in_force_after_two_readings_and_clears_after_two(kind: FaultKind) -> None:
    bad = reading(a=[Fault(kind, "seen")])
    steps = run([reading(), bad, bad, reading(), reading()])
    first, second, third, fourth, fifth = (s.board.verdict(A) for s in steps)
    assert first.fine and second.fine, "one reading failed the GPU"
    assert steps[1].recheck, "a new fault asks for a confirming reading"
    assert third.faults == (Fault(kind, "seen"),) and third.severity is kind.severity and third.since == 10.0
    assert [c.address for c in steps[2].changes] == [A]
    assert not fourth.fine, "one good reading cleared it"
    assert steps[3].recheck, "a recovery is not confirmed soon"
    assert not steps[2].recheck and not steps[4].recheck
    assert fifth.fine and fifth.since == 20.0 and [c.address for c in steps[4].changes] == [A]
    assert all(s.board.verdict(B).fine for s in steps)


def test_flapping_readings_neither_fail_nor_clear() -> None:
    bad, good = reading(a=[Fault(FaultKind.STATE, "Error")]), reading()
    steps = run([bad, good, bad, good, bad, good])
    assert all(s.board.verdict(A).fine for s in steps)
    in_force = run([bad, bad, good, bad, good, bad])
    assert all(not s.board.verdict(A).fine for s in in_force[1:])


def test_a_faults_words_are_those_that_put_it_in_force() -> None:
    hot = [reading(a=[Fault(FaultKind.THERMAL, f"hotspot {t} °C")]) for t in (96, 97, 98)]
    steps = run(hot)
    assert steps[2].board.verdict(A).faults == (Fault(FaultKind.THERMAL, "hotspot 97 °C"),)
    assert steps[2].changes == ()


def test_failed_readings_keep_every_verdict_until_the_grace_then_unknown_then_known_at_once() -> None:
    bad = reading(a=[Fault(FaultKind.STATE, "Error")])
    steps = run([bad, bad, None, None, None, None, None, None, None, reading()])
    assert steps[1].board.verdict(A).severity is Severity.UNUSABLE
    for s in steps[2:8]:  # 5 s apart: 30 s since the last answer at t=5 is reached at t=35 (step 7)
        assert s.board.verdict(A).severity is Severity.UNUSABLE
        assert s.board.verdict(B).fine or s is steps[7]
    unknown = steps[7].board.verdict(B)
    assert unknown.severity is Severity.DEGRADED and unknown.faults[0].kind is FaultKind.HEALTH_UNKNOWN
    assert "mx-smi timed out" in unknown.faults[0].detail
    assert {f.kind for f in steps[8].board.verdict(A).faults} == {FaultKind.STATE, FaultKind.HEALTH_UNKNOWN}
    assert steps[8].changes == (), "a long silence re-announced the unknown"
    known = steps[9].board
    assert known.verdict(B).fine, "an answer did not clear HealthUnknown at once"
    assert known.verdict(A).faults == (Fault(FaultKind.STATE, "Error"),)


def test_a_tool_that_never_answered_is_unknown_after_the_grace_from_its_first_failure() -> None:
    steps = run([None] * 8, start=1000.0)
    assert steps[5].board.verdict(A).fine
    assert steps[6].board.verdict(A).faults[0].kind is FaultKind.HEALTH_UNKNOWN


def test_one_timeout_in_a_hundred_never_withdraws_a_gpu() -> None:
    rng = random.Random(42)
    board = verdict.Board()
    for i in range(10_000):
        r = None if rng.random() < 0.01 else reading()
        step = verdict.step(board, [A, B], r, 5.0 * i, RULES)
        board = step.board
        assert board.verdict(A).fine and board.verdict(B).fine, i


def test_functions_gone_from_the_node_are_forgotten() -> None:
    bad = reading(a=[Fault(FaultKind.STATE, "Error")])
    board = run([bad, bad])[-1].board
    after = verdict.step(board, [B], {B: GpuHealth(B)}, 20.0, RULES).board
    assert A not in after.gpus


def test_a_vf_shows_its_pfs_faults_besides_its_own() -> None:
    pf = PciFunction(A, 0x9999, 0x4000, sriov_numvfs=1, vfs=(VF,))
    vf = PciFunction(VF, 0x9999, 0x4001, kind=FunctionKind.VF, physfn=A)
    board = verdict.Board()
    bad = {A: GpuHealth(A, (Fault(FaultKind.FELL_OFF_BUS, "0xffff"),)), VF: GpuHealth(VF)}
    for t in (0.0, 5.0):
        board = verdict.step(board, [A, VF], bad, t, RULES).board
    shown = verdict.verdicts(board, [pf, vf])
    assert shown[A].severity is Severity.UNUSABLE
    assert shown[VF].faults == (Fault(FaultKind.FELL_OFF_BUS, f"its PF {A}: 0xffff"),)


def test_rules_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="fail_after must be at least 1, got 0"):
        verdict.Rules(fail_after=0)
    with pytest.raises(ValueError, match="unknown_grace must not be negative"):
        verdict.Rules(unknown_grace=-1)
