"""Which pods the operator evicts for an unusable GPU, and the bound on it (``gpuDevice.remediation: evict``,
R-HEALTH, docs/health.md "Remediation").

Why bounded, and why the operator: evicting is the one thing health does to workloads, so it is opt-in, touches
only the pods holding the unusable GPU (never the node's other pods, never for a degraded GPU), goes through the
Eviction API (PodDisruptionBudgets honoured) and happens for at most `BOUND` GPUs per node per `WINDOW`, so a
flapping or misreporting node cannot churn its workloads. The node agents may not evict (their tokens are bound
to their node's objects, and an eviction names no node the admission policy could check), so the agent names
the holders in its report (`metax_core.health.report`) and the operator, which already evicts for a drain,
checks each named pod against the API server (on that node, holding MetaX devices, not finished) before it
evicts it: a report that names another node's pod evicts nothing.

The bound is remembered on the Node (`HISTORY_ANNOTATION`, written by the operator), so a restart of the operator
neither forgets it nor repeats a remediation. One remediation is one GPU's fault episode (its address and the
time it became unusable): its pods are evicted until they are gone, counted once.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core.cluster import gpu_workloads
from metax_core.errors import FieldError, InvalidSpec
from metax_core.health import report
from metax_core.inventory import PciAddress
from metax_core.wire import meta

HISTORY_ANNOTATION = meta.PREFIX + "gpu.remediations"
"""On a GPU node: the operator's remediations within `WINDOW` (JSON list), absent when there were none."""
BOUND = 2
"""At most this many GPUs of one node are remediated per `WINDOW`."""
WINDOW = dt.timedelta(hours=1)

Pod = tuple[str, str]
"""(namespace, name)."""


@attrs.frozen
class Done:
    """One remediation: the pods of GPU ``gpu`` for its fault episode that began at ``since``, started at ``at``."""

    gpu: PciAddress
    since: dt.datetime | None
    at: dt.datetime


def _moment(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: object, where: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise InvalidSpec(
            [FieldError(HISTORY_ANNOTATION, f"{where} must be like 2026-01-02T03:04:05Z, got {text!r}")]
        ) from None


def encode_history(history: Sequence[Done]) -> str:
    return json.dumps(
        [{"gpu": d.gpu, "at": _moment(d.at), **({"since": _moment(d.since)} if d.since else {})} for d in history],
        separators=(",", ":"),
    )


def decode_history(text: str | None) -> tuple[Done, ...]:
    """The history in ``text`` (None or empty: none); `InvalidSpec` naming the entry when it is not one."""
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSpec([FieldError(HISTORY_ANNOTATION, f"not JSON: {exc}")]) from None
    if not isinstance(raw, list):
        raise InvalidSpec([FieldError(HISTORY_ANNOTATION, "must be a list")])
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("gpu"), str):
            raise InvalidSpec([FieldError(HISTORY_ANNOTATION, f"[{i}] must be an object with a gpu")])
        since = _parse(entry["since"], f"[{i}].since") if "since" in entry else None
        out.append(Done(PciAddress(entry["gpu"]), since, _parse(entry.get("at"), f"[{i}].at")))
    return tuple(out)


@attrs.frozen
class Remedy:
    """Evict these pods, which hold the unusable GPU ``gpu``."""

    gpu: report.GpuEntry
    pods: tuple[Pod, ...]


@attrs.frozen
class Plan:
    evict: tuple[Remedy, ...] = ()
    deferred: tuple[tuple[report.GpuEntry, str], ...] = ()
    """GPUs whose pods are not evicted now, and why (the bound)."""
    history: tuple[Done, ...] = ()
    """The history to keep on the Node: the remediations within the window and those whose GPU is still unusable
    in the same episode (so it is never counted again), with this plan's new ones."""


def _named(holder: str) -> Pod | None:
    namespace, _, name = holder.partition("/")
    return (namespace, name) if namespace and name else None


def holders_here(
    node: str, pods: Iterable[Mapping[str, Any]], claimed: Collection[gpu_workloads.Claim] = ()
) -> Callable[[Iterable[str]], tuple[Pod, ...]]:
    """A check of a report's holders against the pods the API server has: kept only the named pods that run on
    ``node``, hold MetaX devices (`gpu_workloads.holds_devices`) and have not finished or begun to go."""
    here: set[Pod] = set()
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node or metadata.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in gpu_workloads.FINISHED_PHASES:
            continue
        if gpu_workloads.holds_devices(pod, claimed):
            here.add((str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")))

    def check(holders: Iterable[str]) -> tuple[Pod, ...]:
        return tuple(sorted(p for h in holders if (p := _named(h)) in here))

    return check


def plan(
    health: report.Report,
    history: Sequence[Done],
    now: dt.datetime,
    present: Callable[[Iterable[str]], tuple[Pod, ...]],
) -> Plan:
    """What to evict now on one node whose report is ``health``: for each unusable GPU, the holders that
    ``present`` confirms; a GPU already being remediated goes on, a new one only while fewer than `BOUND` were
    begun in the last `WINDOW` (the others are deferred, saying until when)."""
    ongoing = {(g.address, g.since) for g in health.unusable()}
    kept = [d for d in history if now - d.at < WINDOW or (d.gpu, d.since) in ongoing]
    begun = {(d.gpu, d.since) for d in kept}
    evict: list[Remedy] = []
    deferred: list[tuple[report.GpuEntry, str]] = []
    for gpu in health.unusable():
        pods = present(gpu.holders)
        if not pods:
            continue
        if (gpu.address, gpu.since) not in begun:
            recent = [d for d in kept if now - d.at < WINDOW]
            if len(recent) >= BOUND:
                until = min(d.at for d in recent) + WINDOW
                deferred.append(
                    (gpu, f"{BOUND} GPUs of this node were remediated in the last hour: not before {_moment(until)}")
                )
                continue
            done = Done(gpu.address, gpu.since, now.astimezone(dt.UTC).replace(microsecond=0))
            kept.append(done)
            begun.add((done.gpu, done.since))
        evict.append(Remedy(gpu, pods))
    return Plan(tuple(evict), tuple(deferred), tuple(kept))
