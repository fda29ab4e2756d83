"""sGPU mode and SR-IOV VFs as kubelet sees them (R-SGPU, R-VF):

- the label ``metax-tech.com/gpu-device.mode=sgpu`` switches the node to ``metax-tech.com/sgpu`` with 16
  devices per GPU (the seed's example) and withdraws ``metax-tech.com/gpu``; ``native`` switches back, in
  the same running agent;
- the share count is configurable;
- the QoS policy label reaches the container through Allocate;
- an unknown mode or policy is reported with a reason and falls back to native / best-effort;
- a PF with VFs is not advertised, its VFs are.
"""

from __future__ import annotations

import logging

import pytest

from metax_core.node import devices

from .conftest import Node
from .fakes import gpu, vf

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
MODE = "metax-tech.com/gpu-device.mode"
QOS = "metax-tech.com/gpu-device.qos-policy"


def test_switches_to_sgpu_and_back_without_restart(node: Node) -> None:
    node.inventory.set([gpu(0x09)])
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {"0000:09:00.0"})

    node.labels.patch_node_metadata("node-a", labels={MODE: "sgpu"})
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(SGPU)) == 16, what="16 sGPUs")
    node.kubelet.wait_for(lambda: not node.kubelet.connected(GPU), what="the gpu plugin to stop")
    assert node.kubelet.devices[GPU] == {}, "the gpu list is emptied before its plugin stops"
    assert not (node.plugin_dir / "metax-gpu.sock").exists()

    node.labels.patch_node_metadata("node-a", labels={MODE: "native"})
    node.kubelet.wait_for(lambda: node.kubelet.registered(GPU) == 2 and node.kubelet.healthy(GPU) == {"0000:09:00.0"})
    node.kubelet.wait_for(lambda: not node.kubelet.connected(SGPU), what="the sgpu plugin to stop")


def test_sgpu_shares_are_configurable_and_qos_reaches_the_container(node: Node) -> None:
    node.inventory.set([gpu(0x09), gpu(0x0A)])
    node.labels.patch_node_metadata("node-a", labels={MODE: "sgpu", QOS: "fixed-share"})
    node.start(sgpu_shares=4)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(SGPU)) == 8)
    assert node.kubelet.registered(GPU) == 0

    ids = sorted(node.kubelet.healthy(SGPU))
    [response] = node.kubelet.allocate(SGPU, [ids[0], ids[1], ids[4]]).container_responses
    assert response.envs["METAX_SGPU_QOS_POLICY"] == "fixed-share"
    assert response.envs["METAX_SGPU_SHARES_PER_GPU"] == "4"
    assert response.envs["METAX_SGPU_SHARES"] == "0000:09:00.0=2,0000:0a:00.0=1"
    assert response.envs["METAX_VISIBLE_DEVICES"] == "0000:09:00.0,0000:0a:00.0"
    assert [c.name for c in response.cdi_devices] == [
        "metax-tech.com/gpu=0000-09-00.0",
        "metax-tech.com/gpu=0000-0a-00.0",
    ]

    node.labels.patch_node_metadata("node-a", labels={QOS: "burst-share"})
    node.kubelet.wait_for(
        lambda: node.agent is not None and node.agent.snapshot.node.qos is devices.QosPolicy.BURST_SHARE
    )
    [response] = node.kubelet.allocate(SGPU, [ids[0]]).container_responses
    assert response.envs["METAX_SGPU_QOS_POLICY"] == "burst-share"


def test_preferred_sgpu_allocation_spreads_over_gpus(node: Node) -> None:
    node.inventory.set([gpu(0x09, path=(1,)), gpu(0x0A, path=(1,)), gpu(0x89, numa=1, path=(0x81,))])
    node.labels.patch_node_metadata("node-a", labels={MODE: "sgpu"})
    node.start(sgpu_shares=2)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(SGPU)) == 6)

    chosen = node.kubelet.preferred(SGPU, sorted(node.kubelet.healthy(SGPU)), [], 2)
    assert chosen == ["0000:09:00.0-00", "0000:0a:00.0-00"]


@pytest.mark.parametrize(
    ("labels", "message", "policy"),
    [
        ({MODE: "vgpu"}, "metax-tech.com/gpu-device.mode='vgpu' is not one of native, sgpu", "best-effort"),
        ({MODE: "sgpu", QOS: "greedy"}, "qos-policy='greedy' is not one of best-effort", "best-effort"),
    ],
)
def test_unknown_label_values_fall_back_with_a_reason(
    node: Node, caplog: pytest.LogCaptureFixture, labels: dict[str, str], message: str, policy: str
) -> None:
    caplog.set_level(logging.WARNING)
    node.labels.patch_node_metadata("node-a", labels=labels)
    agent = node.start()
    if labels[MODE] == "sgpu":
        node.kubelet.wait_for(lambda: len(node.kubelet.healthy(SGPU)) == 64)
    else:
        node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 4)
    node.kubelet.wait_for(lambda: message in caplog.text, what="the reason in the log")
    assert agent.snapshot.node.qos.value == policy


def test_pf_with_vfs_is_replaced_by_its_vfs(node: Node) -> None:
    pf = gpu(0x09, numvfs=2)
    node.inventory.set([pf, vf(pf, 0), vf(pf, 1), gpu(0x0A)])
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {"0000:09:00.1", "0000:09:00.2", "0000:0a:00.0"})

    [response] = node.kubelet.allocate(GPU, ["0000:09:00.2"]).container_responses
    assert response.envs["METAX_VISIBLE_DEVICES"] == "0000:09:00.2"


def test_vf_of_an_unhealthy_pf_is_unhealthy(node: Node) -> None:
    pf = gpu(0x09, numvfs=2)
    node.inventory.set([pf, vf(pf, 0), vf(pf, 1)])
    node.start()
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 2)

    node.monitor.unhealthy[pf.address] = "PF lost"
    node.kubelet.wait_for(lambda: node.kubelet.unhealthy(GPU) == {"0000:09:00.1", "0000:09:00.2"})
