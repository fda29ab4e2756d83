"""Allocate answers from what it decided for the current plan, and never from an older plan (P5,
docs/device-plugin.md "What a container gets"), over real gRPC:

- the same devices, in any order, get the same answer: the agent keeps it from the first Allocate and hands
  out the same allocation (so the plugin server encodes it once);
- a device that turns unhealthy after an Allocate is refused by the next Allocate of the same devices, and
  allocated again once it recovers;
- a device whose CDI entry is no longer on disk after an Allocate is refused by the next one;
- a new sGPU QoS policy reaches the next Allocate of the same shares.
"""

from __future__ import annotations

import grpc
import pytest

from metax_core.node import devices

from .conftest import Node
from .fakes import gpu

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}
SICK = "0000:0a:00.0"


def test_the_same_devices_in_any_order_get_the_kept_answer(node: Node) -> None:
    agent = node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    first = node.kubelet.allocate(GPU, ["0000:0a:00.0", "0000:09:00.0"])
    again = node.kubelet.allocate(GPU, ["0000:09:00.0", "0000:0a:00.0"])
    assert again == first
    assert first.container_responses[0].envs["METAX_VISIBLE_DEVICES"] == "0000:09:00.0,0000:0a:00.0"
    kept = agent.allocate(devices.Resource.GPU, ["0000:0a:00.0", "0000:09:00.0"])
    assert agent.allocate(devices.Resource.GPU, ["0000:09:00.0", "0000:0a:00.0"]) is kept


def test_a_device_turned_unhealthy_after_an_allocate_is_refused_by_the_next(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    node.kubelet.allocate(GPU, [SICK])
    node.kubelet.allocate(GPU, ["0000:09:00.0", SICK])

    node.monitor.unhealthy[node.inventory.present[1].address] = "ECC errors"
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == {SICK}, what="one unhealthy GPU")
    for ids in ([SICK], ["0000:09:00.0", SICK]):
        with pytest.raises(grpc.RpcError, match="unhealthy: .*ECC errors") as refused:
            node.kubelet.allocate(GPU, ids)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION

    node.monitor.unhealthy.clear()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="recovery")
    [response] = node.kubelet.allocate(GPU, [SICK]).container_responses
    assert response.envs["METAX_VISIBLE_DEVICES"] == SICK


def test_a_device_whose_cdi_entry_left_the_disk_after_an_allocate_is_refused_by_the_next(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    node.kubelet.allocate(GPU, ["0000:09:00.0"])

    node.cdi_path.unlink()
    node.cdi_path.mkdir()  # the spec cannot be written: no entry is on disk
    node.kubelet.wait_for(lambda: node.kubelet.devices[GPU] == {}, what="every GPU withdrawn")
    with pytest.raises(grpc.RpcError) as refused:
        node.kubelet.allocate(GPU, ["0000:09:00.0"])
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION

    node.cdi_path.rmdir()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="the GPUs back with their entries")
    assert len(node.kubelet.allocate(GPU, ["0000:09:00.0"]).container_responses[0].cdi_devices) == 1


def test_a_new_qos_policy_reaches_the_next_allocate_of_the_same_shares(node: Node) -> None:
    node.inventory.set([gpu(0x09)])
    node.labels.patch_node_metadata("node-a", labels={devices.MODE_LABEL: "sgpu", devices.QOS_LABEL: "fixed-share"})
    agent = node.start(sgpu_shares=2)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(SGPU)) == 2)
    share = min(node.kubelet.healthy(SGPU))
    [response] = node.kubelet.allocate(SGPU, [share]).container_responses
    assert response.envs["METAX_SGPU_QOS_POLICY"] == "fixed-share"

    node.labels.patch_node_metadata("node-a", labels={devices.QOS_LABEL: "burst-share"})
    node.kubelet.wait_for(lambda: agent.snapshot.node.qos is devices.QosPolicy.BURST_SHARE, what="the new policy")
    [response] = node.kubelet.allocate(SGPU, [share]).container_responses
    assert response.envs["METAX_SGPU_QOS_POLICY"] == "burst-share"
