"""The operator's half of GPU health in its reconcile (R-HEALTH, `services.operator.gpu_health`), on the in-memory
API server: gpu-device's `HealthWatch` writes the report on its Node (the writer's own code), the operator's node
watch wakes a reconcile that sets ``MetaXGPUHealthy`` from it, once per change (quiet in steady state), back to
True when the GPU recovers, and removes it when no agent reports any more."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from harness import Harness, cluster_operator, wait_for

from metax_core.health import report, verdict
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import GpuHealth, PciAddress, PciFunction
from metax_k8s.inmemory import InMemoryCluster
from services._agent import health as health_watch
from services.operator import gpu_health, informers

GPU = PciAddress("0000:09:00.0")
FUNCTIONS = [PciFunction(GPU, 0x9999, 0x4000)]


class Monitor:
    def __init__(self) -> None:
        self.faults: tuple[Fault, ...] = ()

    def health(self) -> Mapping[PciAddress, GpuHealth]:
        return {GPU: GpuHealth(GPU, self.faults)}


def condition(h: Harness, node: str) -> dict[str, Any] | None:
    got = h.objects.get("v1", "Node", node) or {}
    return next(
        (c for c in (got.get("status") or {}).get("conditions") or [] if c["type"] == report.CONDITION_TYPE), None
    )


def test_the_condition_follows_the_agents_report_once_per_change(harness: Harness) -> None:
    harness.objects.apply(cluster_operator(), field_manager="helm")
    harness.start()
    monitor = Monitor()
    clock = iter(float(t) for t in range(0, 10_000, 5))
    watch = health_watch.HealthWatch(
        "gpu-device",
        "gpu-1",
        monitor=monitor,
        nodes=harness.cluster.node_metadata,
        events=None,
        rules=verdict.Rules(),
        wall=lambda: next(clock),
    )

    def reading() -> None:
        watch.read(FUNCTIONS)
        watch.publish(FUNCTIONS, {})

    reading()
    wait_for("condition True", lambda: (condition(harness, "gpu-1") or {}).get("status") == "True")
    monitor.faults = (Fault(FaultKind.NOT_ANSWERING, "not listed by mx-smi"),)
    reading()
    reading()
    shown = wait_for("condition False", lambda: (c := condition(harness, "gpu-1")) and c["status"] == "False" and c)
    assert shown["reason"] == "GPUUnusable" and GPU in shown["message"] and "NotAnswering" in shown["message"]
    writes = harness.op.reconciler.gpu_health.condition_writes
    for _ in range(3):
        reading()  # the same verdict: no report write, no condition write
        harness.settle()
    assert harness.op.reconciler.gpu_health.condition_writes == writes
    monitor.faults = ()
    reading()
    reading()
    back = wait_for("condition True again", lambda: (c := condition(harness, "gpu-1")) and c["status"] == "True" and c)
    assert back["lastTransitionTime"] != shown["lastTransitionTime"]
    harness.cluster.node_metadata.patch_node_metadata("gpu-1", annotations={report.ANNOTATION: None})
    wait_for("condition removed", lambda: condition(harness, "gpu-1") is None)
    assert condition(harness, "gpu-2") is None, "a node without a report got a condition"


def test_a_condition_written_but_not_yet_in_the_node_cache_is_not_written_again() -> None:
    """The ordering that made the test above flaky under load: a reconcile woken by another change of the node runs
    before the watch delivers the operator's own condition write, so its cached node still has the old condition.
    The same write is not repeated (it would change nothing), except once `UNSEEN_WRITE_SECONDS` have passed."""
    cluster = InMemoryCluster()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}
    cluster.api.create(node)
    health = gpu_health.GpuHealth(
        cluster.objects, cluster.node_metadata, cluster.events(reporting_controller="t", reporting_instance="t")
    )
    sick = report.Report(
        gpus=(report.GpuEntry(GPU, (Fault(FaultKind.NOT_ANSWERING, "not listed by mx-smi"),)),),
        judged=1,
        agent="gpu-device",
    )
    cached = informers.slim_node(
        {**node, "metadata": {"name": "gpu-1", "annotations": {report.ANNOTATION: report.encode(sick)}}}
    )
    start = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
    health.apply([cached], None, start)
    assert health.condition_writes == 1
    health.apply([cached], None, start + dt.timedelta(seconds=1))  # the cache still shows no condition
    assert health.condition_writes == 1
    written = cluster.objects.get("v1", "Node", "gpu-1") or {}
    seen = informers.slim_node({**written, "metadata": cached["metadata"]})
    health.apply([seen], None, start + dt.timedelta(seconds=2))  # now it shows the write: nothing to do
    assert health.condition_writes == 1
    late = start + dt.timedelta(seconds=gpu_health.UNSEEN_WRITE_SECONDS + 1)
    health.apply([cached], None, late)  # a write that never showed is repeated
    assert health.condition_writes == 2
