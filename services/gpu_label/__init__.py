"""gpu-label (C2, R-LABELS): the node's GPU labels and HAMi's ``metax-tech.com/node-gpu-devices`` annotation.

`agent` gathers the inventory through the hardware port, asks `metax_core.node.labels` for every key it owns,
and patches only what differs on its own Node; it follows hot-plug, VF and health changes on its interval.
"""
