"""Health as kubelet sees it through ListAndWatch:

- a GPU the monitor reports unhealthy turns Unhealthy, the others stay Healthy;
- it turns Healthy again when it recovers (unlike NVIDIA's plugin, which never recovers);
- an Unhealthy device is not allocated;
- a GPU that leaves the inventory is withdrawn, one that appears is added;
- a monitor that fails keeps every verdict (unknown is not unhealthy), and only after the grace period makes
  every GPU Unhealthy (HealthUnknown, degraded); its next answer clears it at once (R-HEALTH);
- healthy_interval 0 turns health checks off (the monitor is never called).
"""

from __future__ import annotations

import grpc
import pytest

from metax_core.errors import HardwareError

from .conftest import Node, four_gpus
from .fakes import gpu

GPU = "metax-tech.com/gpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}
SICK = "0000:0a:00.0"


def test_unhealthy_gpu_is_reported_and_recovers(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    node.monitor.unhealthy[node.inventory.present[1].address] = "ECC errors"
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == {SICK}, what="one unhealthy GPU")
    assert node.kubelet.healthy(GPU) == ALL - {SICK}

    node.monitor.unhealthy.clear()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="recovery")


def test_unhealthy_gpu_is_not_allocated(node: Node) -> None:
    node.monitor.unhealthy[node.inventory.present[1].address] = "ECC errors"
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == {SICK})

    with pytest.raises(grpc.RpcError, match="unhealthy: StateFault: ECC errors"):
        node.kubelet.allocate(GPU, [SICK])


def test_gpu_leaving_the_inventory_is_withdrawn_and_a_new_one_added(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    node.inventory.set(four_gpus()[:3])
    node.kubelet.wait_for(lambda: set(node.kubelet.devices[GPU]) == ALL - {"0000:8a:00.0"}, what="withdrawal")

    node.inventory.set([*four_gpus(), gpu(0xC0, numa=1)])
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL | {"0000:c0:00.0"}, what="a new GPU")


def test_failing_monitor_keeps_the_verdicts_for_the_grace_then_degrades_and_recovers(node: Node) -> None:
    node.start(health_unknown_grace=2)
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    node.monitor.fail = HardwareError("mx-smi", None, "timed out")
    calls = node.monitor.calls
    node.kubelet.wait_for(lambda: node.monitor.calls - calls >= 2, what="two failed readings")
    assert node.kubelet.healthy(GPU) == ALL, "a failed reading withdrew a GPU"
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == ALL, what="all degraded after the grace")

    node.monitor.fail = None
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="recovery")


def test_health_checks_off_when_interval_is_zero(node: Node) -> None:
    node.monitor.unhealthy[node.inventory.present[0].address] = "would be reported if checks ran"
    node.start(healthy_interval=0)
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    node.inventory.set(four_gpus()[:2])  # the loop keeps running: the inventory still refreshes
    node.kubelet.wait_for(lambda: set(node.kubelet.devices[GPU]) == {"0000:09:00.0", SICK})
    assert node.monitor.calls == 0
