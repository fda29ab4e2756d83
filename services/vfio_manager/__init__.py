"""vfio-manager (C10, R-VFIO, R-KUBEVIRT): binds the GPUs ``metax-vfio-config`` selects to vfio-pci.

`agent` reads the ConfigMap, asks `metax_core.node.vfio` what to bind and what to give back, binds through
the hardware port (IOMMU groups whole), and publishes ``metax-tech.com/gpu-vfio`` on its Node.
"""
