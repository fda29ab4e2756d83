"""Remediation of unusable GPUs: only the pods holding that GPU, confirmed on the node, at most two GPUs per node
per hour, remembered on the Node (R-HEALTH, docs/health.md "Remediation")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from metax_core.cluster import gpu_remediation as remediation
from metax_core.errors import InvalidSpec
from metax_core.health import report
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import PciAddress

NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
GPUS = [PciAddress(f"0000:{b:02x}:00.0") for b in (9, 10, 11, 12)]


def pod(name: str, node: str = "gpu-1", *, gpu: bool = True, phase: str = "Running", gone: bool = False) -> Any:
    resources = {"limits": {"metax-tech.com/gpu": "1"}} if gpu else {}
    metadata: dict[str, Any] = {"namespace": "ml", "name": name}
    if gone:
        metadata["deletionTimestamp"] = "2026-12-07T11:59:00Z"
    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def entry(gpu: PciAddress, *holders: str, kind: FaultKind = FaultKind.FELL_OFF_BUS) -> report.GpuEntry:
    return report.GpuEntry(gpu, (Fault(kind, "x"),), NOW - dt.timedelta(minutes=1), holders)


PODS = [pod("a"), pod("b"), pod("c"), pod("d"), pod("elsewhere", node="gpu-2"), pod("cpu", gpu=False)]
HERE = remediation.holders_here("gpu-1", [*PODS, pod("done", phase="Succeeded"), pod("going", gone=True)])


def test_only_the_unusable_gpus_holders_confirmed_on_the_node_are_evicted() -> None:
    health = report.Report(
        (
            entry(GPUS[0], "ml/a", "ml/elsewhere", "ml/cpu", "ml/done", "ml/going", "ml/unknown", "bad"),
            entry(GPUS[1], "ml/b", kind=FaultKind.THERMAL),  # degraded: never remediated
        ),
        judged=8,
    )
    made = remediation.plan(health, (), NOW, HERE)
    assert [(r.gpu.address, r.pods) for r in made.evict] == [(GPUS[0], (("ml", "a"),))]
    assert made.history == (remediation.Done(GPUS[0], NOW - dt.timedelta(minutes=1), NOW),)


def test_two_gpus_per_hour_then_deferred_until_the_oldest_leaves_the_window() -> None:
    health = report.Report(tuple(entry(g, f"ml/{n}") for g, n in zip(GPUS, "abcd", strict=True)), judged=8)
    made = remediation.plan(health, (), NOW, HERE)
    assert [r.gpu.address for r in made.evict] == GPUS[:2]
    assert [g.address for g, _ in made.deferred] == GPUS[2:]
    assert "not before 2026-12-07T13:00:00Z" in made.deferred[0][1]
    again = remediation.plan(health, made.history, NOW + dt.timedelta(minutes=5), HERE)
    assert [r.gpu.address for r in again.evict] == GPUS[:2], "a begun remediation stopped"
    assert again.history == made.history, "a begun remediation was counted twice"
    later = remediation.plan(health, made.history, NOW + dt.timedelta(hours=1), HERE)
    assert [r.gpu.address for r in later.evict] == GPUS, "the window did not pass"


def test_a_new_episode_of_the_same_gpu_is_a_new_remediation() -> None:
    first = report.Report((entry(GPUS[0], "ml/a"),), judged=8)
    made = remediation.plan(first, (), NOW, HERE)
    recurred = attrs_evolve_since(first, NOW + dt.timedelta(minutes=10))
    again = remediation.plan(recurred, made.history, NOW + dt.timedelta(minutes=11), HERE)
    assert len(again.history) == 2


def attrs_evolve_since(health: report.Report, since: dt.datetime) -> report.Report:
    (gpu,) = health.gpus
    return report.Report((report.GpuEntry(gpu.address, gpu.faults, since, gpu.holders),), judged=health.judged)


def test_nothing_to_evict_counts_nothing() -> None:
    health = report.Report((entry(GPUS[0]),), judged=8)
    assert remediation.plan(health, (), NOW, HERE) == remediation.Plan()


def test_the_history_round_trips_and_a_bad_one_is_refused_naming_the_entry() -> None:
    history = (remediation.Done(GPUS[0], NOW, NOW), remediation.Done(GPUS[1], None, NOW))
    assert remediation.decode_history(remediation.encode_history(history)) == history
    assert remediation.decode_history(None) == ()
    with pytest.raises(InvalidSpec, match=r"\[0\]\.at must be like"):
        remediation.decode_history('[{"gpu": "x", "at": "noon"}]')
    with pytest.raises(InvalidSpec, match="must be a list"):
        remediation.decode_history("{}")
