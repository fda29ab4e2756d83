"""gpu-device speaks the kubelet device plugin protocol v1beta1 (C3), checked through a test kubelet:

- registration: API version, resource name, endpoint socket, options (preferred allocation on);
- ListAndWatch: one device per GPU with its NUMA node, Healthy;
- Allocate: device nodes, METAX_VISIBLE_DEVICES, CDI device names, several containers in one call;
- Allocate of an unknown device is refused with a reason;
- GetPreferredAllocation over the wire picks GPUs behind one PCIe switch;
- PreStartContainer answers.
"""

from __future__ import annotations

import grpc
import pytest

from .conftest import Node

GPU = "metax-tech.com/gpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}


def test_registers_and_lists_every_gpu(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL, what="four healthy GPUs")

    [request] = node.kubelet.registrations
    assert request.version == "v1beta1"
    assert request.endpoint == "metax-gpu.sock"
    assert request.options.get_preferred_allocation_available
    assert not request.options.pre_start_required
    assert (node.plugin_dir / request.endpoint).is_socket()
    numa = {i: [n.ID for n in d.topology.nodes] for i, d in node.kubelet.devices[GPU].items()}
    assert numa == {"0000:09:00.0": [0], "0000:0a:00.0": [0], "0000:89:00.0": [1], "0000:8a:00.0": [1]}


def test_allocate_returns_device_nodes_env_and_cdi_names(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    response = node.kubelet.allocate(GPU, ["0000:0a:00.0", "0000:09:00.0"], ["0000:89:00.0"])

    first, second = response.container_responses
    assert first.envs["METAX_VISIBLE_DEVICES"] == "0000:09:00.0,0000:0a:00.0"
    assert [d.host_path for d in first.devices] == [
        "/dev/dri/card0",
        "/dev/dri/renderD128",
        "/dev/mxcd",
        "/dev/dri/card1",
        "/dev/dri/renderD129",
    ]
    assert all(d.container_path == d.host_path and d.permissions == "rw" for d in first.devices)
    assert [c.name for c in first.cdi_devices] == ["metax-tech.com/gpu=0000-09-00.0", "metax-tech.com/gpu=0000-0a-00.0"]
    assert second.envs["METAX_VISIBLE_DEVICES"] == "0000:89:00.0"
    assert [c.name for c in second.cdi_devices] == ["metax-tech.com/gpu=0000-89-00.0"]


def test_allocate_of_an_unknown_device_is_refused_with_a_reason(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    with pytest.raises(grpc.RpcError, match="0000:77:00.0.*not advertised") as caught:
        node.kubelet.allocate(GPU, ["0000:77:00.0"])
    assert caught.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_preferred_allocation_keeps_gpus_behind_one_switch(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    assert node.kubelet.preferred(GPU, sorted(ALL), [], 2) == ["0000:09:00.0", "0000:0a:00.0"]
    assert node.kubelet.preferred(GPU, sorted(ALL), ["0000:8a:00.0"], 2) == ["0000:89:00.0", "0000:8a:00.0"]
    assert node.kubelet.preferred(GPU, ["0000:09:00.0", "0000:89:00.0", "0000:8a:00.0"], [], 2) == [
        "0000:89:00.0",
        "0000:8a:00.0",
    ]


def test_pre_start_container_answers(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    assert node.kubelet.pre_start(GPU, ["0000:09:00.0"]).ByteSize() == 0
