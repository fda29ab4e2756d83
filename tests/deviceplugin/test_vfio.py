"""``metax-tech.com/vfio-gpu`` for functions bound to vfio-pci (R-VFIO, R-KUBEVIRT), through the test kubelet:

- its own plugin server, socket and registration, next to ``metax-tech.com/gpu``;
- Allocate gives the VFIO container node and each function's IOMMU group node, and the PCI addresses in
  the variable KubeVirt reads (``PCI_RESOURCE_<resource name, '.' and '/' as '_'>``);
- a function rebound from vfio-pci to metax moves from vfio-gpu to gpu, and vfio-gpu stops when empty;
- with the IOMMU off nothing is advertised as vfio-gpu.
"""

from __future__ import annotations

from .conftest import Node
from .fakes import gpu

GPU = "metax-tech.com/gpu"
VFIO = "metax-tech.com/vfio-gpu"


def test_vfio_bound_functions_get_their_own_resource(node: Node) -> None:
    node.inventory.set([gpu(0x09), gpu(0x0A, driver="vfio-pci", group=41), gpu(0x0B, driver="vfio-pci", group=42)])
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(VFIO) == {"0000:0a:00.0", "0000:0b:00.0"})
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {"0000:09:00.0"})
    assert [r.endpoint for r in node.kubelet.registrations if r.resource_name == VFIO] == ["metax-vfio-gpu.sock"]

    [response] = node.kubelet.allocate(VFIO, ["0000:0b:00.0", "0000:0a:00.0"]).container_responses
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
        ("/dev/vfio/vfio", "/dev/vfio/vfio", "rw"),
        ("/dev/vfio/41", "/dev/vfio/41", "rw"),
        ("/dev/vfio/42", "/dev/vfio/42", "rw"),
    ]
    assert response.envs["PCI_RESOURCE_METAX-TECH_COM_VFIO-GPU"] == "0000:0a:00.0,0000:0b:00.0"
    assert response.envs["PCI_RESOURCE_METAX_TECH_COM_VFIO_GPU"] == "0000:0a:00.0,0000:0b:00.0"
    assert list(response.cdi_devices) == []


def test_function_returning_to_metax_moves_back_to_gpu(node: Node) -> None:
    node.inventory.set([gpu(0x09), gpu(0x0A, driver="vfio-pci")])
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(VFIO) == {"0000:0a:00.0"})

    node.inventory.set([gpu(0x09), gpu(0x0A)])
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {"0000:09:00.0", "0000:0a:00.0"})
    node.kubelet.wait_for(lambda: not node.kubelet.connected(VFIO), what="vfio-gpu to stop")
    assert node.kubelet.devices[VFIO] == {}


def test_nothing_is_advertised_as_vfio_gpu_without_iommu(node: Node) -> None:
    node.inventory.set([gpu(0x09), gpu(0x0A, driver="vfio-pci")])
    node.inventory.iommu = False
    agent = node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {"0000:09:00.0"})
    node.kubelet.wait_for(lambda: "IOMMU is off" in " ".join(agent.snapshot.plan.problems))
    assert node.kubelet.registered(VFIO) == 0
