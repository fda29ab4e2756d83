"""How a GPU's readings over time become its verdict (R-HEALTH, docs/health.md "Verdict rules").

Why a machine and not the last reading: one noisy reading must neither fail nor clear a GPU (NVIDIA's and
HAMi's users complain of false positives), a GPU that recovers must come back by itself (dra-driver-nvidia-gpu
#1455: a taint that stays until the plugin restarts), and a reading that failed because the tool failed says
nothing about the GPUs (gpu-operator #1065).

The rules, per GPU and per fault kind (`Rules`):

- a fault is **in force** once ``fail_after`` consecutive readings show it, and **clears** after ``clear_after``
  consecutive readings without it; a reading that disagrees with the verdict (a fault not in force yet, or one in
  force that it does not show) asks for the next reading ``recheck`` seconds later instead of a whole interval
  (`Step.recheck`), so a real fault is in force, and a real recovery clears, within one interval plus
  ``recheck``, while a single bad (or good) reading is forgotten;
- a reading that **failed** (`step` with None: the tool timed out, crashed or printed garbage) changes no count:
  every GPU keeps its verdict. Only when no reading has succeeded for ``unknown_grace`` seconds does every GPU
  get the degraded fault ``HealthUnknown`` (new work should not land where nothing is known); the next reading
  that succeeds removes it at once.

A VF (or an sGPU share, which is its GPU) shows its PF's faults as well as its own (`verdicts`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import attrs

from metax_core.health.faults import Fault, FaultKind, Severity, worst
from metax_core.inventory import GpuHealth, PciAddress, PciFunction


def _at_least_one(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


def _not_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


@attrs.frozen
class Rules:
    """How many readings fail and clear a fault, and how long a silent tool is trusted."""

    fail_after: int = attrs.field(default=2, validator=_at_least_one)
    clear_after: int = attrs.field(default=2, validator=_at_least_one)
    unknown_grace: float = attrs.field(default=30.0, validator=_not_negative)
    """Seconds without a successful reading before every GPU is HealthUnknown (degraded)."""
    recheck: float = attrs.field(default=0.5, validator=_not_negative)
    """Seconds after a reading that disagreed with the verdict before the reading that confirms it (at most half
    the reader's interval: `recheck_after`)."""

    def recheck_after(self, interval: float) -> float:
        """When a reader reading every ``interval`` seconds reads again after a reading that disagreed: so a fault
        or a recovery is confirmed within 1.5 intervals."""
        return min(self.recheck, interval / 2)


RULES = Rules()


@attrs.frozen
class Streak:
    """One fault kind on one GPU: the readings in a row that showed it, or that did not since it is in force."""

    fault: Fault
    """The words of the reading that put it in force (or of the latest, while it is not): a temperature that
    moves by a degree changes no verdict and no report."""
    seen: int = 0
    missed: int = 0
    in_force: bool = False


@attrs.frozen
class Verdict:
    """What a GPU is, as every consumer shows it."""

    faults: tuple[Fault, ...] = ()
    """The faults in force, sorted by kind."""
    since: float | None = None
    """When its severity last changed (the caller's clock; None: fine since it was first judged)."""

    @property
    def severity(self) -> Severity:
        return worst(self.faults)

    @property
    def fine(self) -> bool:
        return not self.faults

    def describe(self) -> str:
        return "; ".join(f.describe() for f in self.faults) if self.faults else "healthy"


FINE = Verdict()


@attrs.frozen
class GpuState:
    streaks: Mapping[FaultKind, Streak] = attrs.field(factory=dict)
    since: float | None = None

    @property
    def verdict(self) -> Verdict:
        return Verdict(tuple(sorted(s.fault for s in self.streaks.values() if s.in_force)), self.since)


@attrs.frozen
class Board:
    """Every function's streaks, and whether the tool answers."""

    gpus: Mapping[PciAddress, GpuState] = attrs.field(factory=dict)
    answered_at: float | None = None
    """When a reading last succeeded."""
    failing_since: float | None = None
    """When the readings started failing (None while they succeed)."""

    def verdict(self, address: PciAddress) -> Verdict:
        state = self.gpus.get(address)
        return state.verdict if state is not None else FINE


@attrs.frozen
class Change:
    address: PciAddress
    before: Verdict
    after: Verdict


@attrs.frozen
class Step:
    board: Board
    changes: tuple[Change, ...] = ()
    recheck: bool = False
    """A reading disagreed with a verdict (a fault not in force yet, or a fault in force not shown): read again
    after `Rules.recheck`."""


def _advance(state: GpuState, shown: Mapping[FaultKind, Fault], rules: Rules, now: float) -> GpuState:
    streaks: dict[FaultKind, Streak] = {}
    for kind in sorted(set(state.streaks) | set(shown), key=lambda k: k.value):
        old = state.streaks.get(kind)
        if kind in shown:
            seen = (old.seen if old is not None else 0) + 1
            if old is not None and old.in_force:  # its words stay those that put it in force (quiet writers)
                streaks[kind] = Streak(old.fault, seen=seen, missed=0, in_force=True)
            else:
                streaks[kind] = Streak(shown[kind], seen=seen, missed=0, in_force=seen >= rules.fail_after)
        elif kind is FaultKind.HEALTH_UNKNOWN:
            continue  # a reading answered: known again at once
        elif old is not None and old.in_force and old.missed + 1 < rules.clear_after:
            streaks[kind] = Streak(old.fault, seen=0, missed=old.missed + 1, in_force=True)
    return _dated(state, GpuState(streaks, state.since), now)


def _dated(before: GpuState, after: GpuState, now: float) -> GpuState:
    if before.verdict.severity != after.verdict.severity:
        return attrs.evolve(after, since=now)
    return after


def _unknown(failure: str, since: float) -> Streak:
    detail = f"no health reading for {since:.0f} s" + (f": {failure}" if failure else "")
    return Streak(Fault(FaultKind.HEALTH_UNKNOWN, detail), seen=1, in_force=True)


def step(
    board: Board,
    functions: Collection[PciAddress],
    reading: Mapping[PciAddress, GpuHealth] | None,
    now: float,
    rules: Rules = RULES,
    failure: str = "",
) -> Step:
    """The board after one reading at ``now`` of ``functions`` (the node's MetaX functions now); ``reading`` is
    None when the reading failed as a whole (``failure`` says why). Functions gone from the node are forgotten."""
    gpus: dict[PciAddress, GpuState] = {}
    if reading is not None:
        for address in sorted(functions):
            health = reading.get(address)
            shown = {f.kind: f for f in (health.faults if health is not None else ())}
            gpus[address] = _advance(board.gpus.get(address, GpuState()), shown, rules, now)
        after = Board(gpus, answered_at=now, failing_since=None)
    else:
        failing_since = board.failing_since if board.failing_since is not None else now
        silent_for = now - (board.answered_at if board.answered_at is not None else failing_since)
        for address in sorted(functions):
            state = board.gpus.get(address, GpuState())
            if silent_for >= rules.unknown_grace and FaultKind.HEALTH_UNKNOWN not in state.streaks:
                streaks = {**state.streaks, FaultKind.HEALTH_UNKNOWN: _unknown(failure, silent_for)}
                state = _dated(state, GpuState(streaks, state.since), now)
            gpus[address] = state
        after = Board(gpus, answered_at=board.answered_at, failing_since=failing_since)
    changes = tuple(
        Change(address, board.verdict(address), after.verdict(address))
        for address in sorted(gpus)
        if _kinds(board.verdict(address)) != _kinds(after.verdict(address))
    )
    recheck = any((not s.in_force) or s.missed for g in gpus.values() for s in g.streaks.values())
    return Step(after, changes, recheck)


def _kinds(verdict: Verdict) -> frozenset[FaultKind]:
    return frozenset(f.kind for f in verdict.faults)


def verdicts(board: Board, functions: Sequence[PciFunction]) -> dict[PciAddress, Verdict]:
    """Every function's verdict as consumers show it: a VF's includes its PF's faults."""
    own = {f.address: board.verdict(f.address) for f in functions}
    out: dict[PciAddress, Verdict] = {}
    for f in functions:
        mine = own[f.address]
        parent = own.get(f.physfn) if f.physfn is not None else None
        if parent is None or parent.fine:
            out[f.address] = mine
            continue
        inherited = tuple(attrs.evolve(x, detail=f"its PF {f.physfn}: {x.detail}") for x in parent.faults)
        mine_kinds = {x.kind for x in mine.faults}
        faults = tuple(sorted((*mine.faults, *(x for x in inherited if x.kind not in mine_kinds))))
        since = max(s for s in (mine.since, parent.since) if s is not None) if parent.since or mine.since else None
        out[f.address] = Verdict(faults, since)
    return out
