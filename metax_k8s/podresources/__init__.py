"""The kubelet PodResources API (v1): which devices the kubelet gave to which pod's containers.

Why this package exists: node agents need to attribute devices to pods (the data exporter labels GPU
metrics with the pod that holds the GPU; tests prove that a GPU pod got the devices the plugin handed
out). The kubelet answers on ``<root-dir>/pod-resources/kubelet.sock``; ``client`` reads it and returns
plain records, ``v1`` is the generated gRPC code (``regen.sh``).
"""
