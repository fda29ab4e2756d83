"""The node's GPU health as its allocator agent publishes it on the Node, for the operator and doctor
(R-HEALTH, docs/health.md "What each consumer shows").

Why an annotation: the agent that judges the GPUs (gpu-device on a device-plugin node, the DRA driver on a DRA
node) may write only its own Node's ``metax-tech.com/`` keys (the node-bound admission policy), and it alone
knows which pods hold which GPU (the kubelet's PodResources). The operator's node watch reads `ANNOTATION` and
sets the Node's condition `CONDITION_TYPE` (an administrator's ``kubectl describe node`` shows it) and, with
``gpuDevice.remediation: evict``, evicts the pods holding an unusable GPU (`metax_core.cluster.gpu_remediation`).

One owner of the format, this module: the agents call `encode`, the operator and doctor `decode`; a round trip
test checks both. Only GPUs that are not fine are listed, with what they hold, so a healthy node's value is
small and steady: the agent writes it only when it changes.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.health.faults import Fault, FaultKind, Severity, worst
from metax_core.health.verdict import Verdict
from metax_core.inventory import PciAddress
from metax_core.wire import event_reasons, meta

ANNOTATION = meta.PREFIX + "gpu.health"
"""On a GPU node: its allocator agent's `Report` (JSON); absent while no agent judges its GPUs."""
CONDITION_TYPE = "MetaXGPUHealthy"
"""The Node condition the operator sets from the report."""
HEALTHY_REASON = "GPUsHealthy"
UNKNOWN_REASON = "GPUHealthUnknown"
DETAIL_LIMIT = 200
"""Characters of a fault's words kept in the annotation (the operator caches it per node)."""


def _bounded(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


@attrs.frozen
class GpuEntry:
    """One GPU that is not fine."""

    address: PciAddress
    faults: tuple[Fault, ...]
    since: dt.datetime | None = None
    holders: tuple[str, ...] = ()
    """``namespace/name`` of the pods holding it (or one of its VFs or shares), sorted."""

    @property
    def severity(self) -> Severity:
        return worst(self.faults)

    def describe(self) -> str:
        return f"{self.address} {self.severity.word} ({'; '.join(f.describe() for f in self.faults)})"


@attrs.frozen
class Report:
    gpus: tuple[GpuEntry, ...] = ()
    judged: int = 0
    """How many MetaX functions the agent judged (all of them fine when none is listed)."""
    agent: str = ""
    """Which agent wrote it (``gpu-device`` or ``dra-driver``)."""

    def unusable(self) -> tuple[GpuEntry, ...]:
        return tuple(g for g in self.gpus if g.severity is Severity.UNUSABLE)


def of(
    verdicts: Mapping[PciAddress, Verdict],
    holders: Mapping[PciAddress, Sequence[str]],
    agent: str,
) -> Report:
    """The report for ``verdicts`` (since: the caller's wall clock, seconds) and who holds each GPU."""
    entries = tuple(
        GpuEntry(
            address,
            tuple(attrs.evolve(f, detail=_bounded(f.detail)) for f in v.faults),
            dt.datetime.fromtimestamp(int(v.since), dt.UTC) if v.since is not None else None,
            tuple(sorted(set(holders.get(address, ())))),
        )
        for address, v in sorted(verdicts.items())
        if not v.fine
    )
    return Report(entries, judged=len(verdicts), agent=agent)


def _moment(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode(report: Report) -> str:
    """The annotation's value (keys sorted, so equal reports are equal strings)."""
    body: dict[str, Any] = {
        "agent": report.agent,
        "judged": report.judged,
        "gpus": [
            {
                "address": g.address,
                "severity": g.severity.word,
                "faults": [{"kind": f.kind.value, "detail": f.detail} for f in g.faults],
                **({"since": _moment(g.since)} if g.since is not None else {}),
                **({"holders": list(g.holders)} if g.holders else {}),
            }
            for g in report.gpus
        ],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _field(where: str, value: object, kind: type) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise InvalidSpec([FieldError(ANNOTATION, f"{where} must be a {kind.__name__}, got {value!r}")])
    return value


def decode(text: str) -> Report:
    """The report in ``text``; `InvalidSpec` naming the field when it is not one."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSpec([FieldError(ANNOTATION, f"not JSON: {exc}")]) from None
    _field("the value", body, dict)
    gpus = []
    for i, raw in enumerate(_field("gpus", body.get("gpus", []), list)):
        where = f"gpus[{i}]"
        _field(where, raw, dict)
        faults = []
        for j, f in enumerate(_field(f"{where}.faults", raw.get("faults"), list)):
            _field(f"{where}.faults[{j}]", f, dict)
            try:
                kind = FaultKind.from_name(_field(f"{where}.faults[{j}].kind", f.get("kind"), str))
            except ValueError as exc:
                raise InvalidSpec([FieldError(ANNOTATION, f"{where}.faults[{j}].kind: {exc}")]) from None
            faults.append(Fault(kind, _field(f"{where}.faults[{j}].detail", f.get("detail", ""), str)))
        since = None
        if "since" in raw:
            try:
                since = dt.datetime.strptime(_field(f"{where}.since", raw["since"], str), "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                raise InvalidSpec(
                    [FieldError(ANNOTATION, f"{where}.since must be like 2026-01-02T03:04:05Z")]
                ) from None
            since = since.replace(tzinfo=dt.UTC)
        holders = tuple(
            _field(f"{where}.holders[]", h, str) for h in _field(f"{where}.holders", raw.get("holders", []), list)
        )
        if not faults:
            raise InvalidSpec([FieldError(ANNOTATION, f"{where}.faults must name at least one fault")])
        address = PciAddress(_field(f"{where}.address", raw.get("address"), str))
        gpus.append(GpuEntry(address, tuple(faults), since, holders))
    return Report(
        tuple(gpus),
        judged=_field("judged", body.get("judged", 0), int),
        agent=_field("agent", body.get("agent", ""), str),
    )


@attrs.frozen
class Condition:
    """The Node condition `CONDITION_TYPE` as the report says it."""

    status: str
    reason: str
    message: str


def condition(report: Report) -> Condition:
    """True with `HEALTHY_REASON` when every GPU is fine; else False, the reason the worst fault kind's
    severity (``GPUUnusable``/``GPUDegraded``, `UNKNOWN_REASON` when only the health is unknown) and the
    message every GPU that is not fine with its faults."""
    if not report.gpus:
        return Condition("True", HEALTHY_REASON, f"all {report.judged} MetaX GPU function(s) healthy")
    severity = max(g.severity for g in report.gpus)
    only_unknown = all(f.kind is FaultKind.HEALTH_UNKNOWN for g in report.gpus for f in g.faults)
    reason = UNKNOWN_REASON if only_unknown else f"GPU{severity.word.capitalize()}"
    return Condition("False", reason, "; ".join(g.describe() for g in report.gpus))


def node_condition(node: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The Node's `CONDITION_TYPE` condition as it stands (None: it has none)."""
    conditions = ((node or {}).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)


def says(cond: Mapping[str, Any] | None) -> tuple[object, ...]:
    """What a Node condition says: (status, reason, message); () for none. Two conditions saying the same differ at
    most in their times."""
    return () if cond is None else (cond.get("status"), cond.get("reason"), cond.get("message"))


def condition_to_apply(health: Report, have: Mapping[str, Any] | None, now: str) -> dict[str, str] | None:
    """The condition to write for ``health`` at ``now``, or None when ``have`` (the Node's) already says it: quiet
    in steady state; its ``lastTransitionTime`` moves only when its status does."""
    wanted = condition(health)
    if says(have) == (wanted.status, wanted.reason, wanted.message):
        return None
    kept = have is not None and have.get("status") == wanted.status and have.get("lastTransitionTime")
    return {
        "type": CONDITION_TYPE,
        "status": wanted.status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastTransitionTime": str(have["lastTransitionTime"]) if kept and have is not None else now,
        "lastHeartbeatTime": now,
    }


@attrs.frozen
class News:
    """The Event an agent emits on its Node for a GPU whose verdict changed."""

    reason: str
    warning: bool
    message: str


def news(address: PciAddress, before: Verdict, after: Verdict) -> News:
    """``GPUUnusable``/``GPUDegraded`` (Warning) when it got worse or its faults changed, ``GPURecovered``
    (Normal) when it is fine again."""
    if after.fine:
        return News(event_reasons.GPU_RECOVERED, False, f"GPU {address} is healthy again (was: {before.describe()})")
    reason = event_reasons.GPU_UNUSABLE if after.severity is Severity.UNUSABLE else event_reasons.GPU_DEGRADED
    return News(reason, True, f"GPU {address} is {after.severity.word}: {after.describe()}")
