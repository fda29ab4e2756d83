"""The environment a GPU workload's container carries: what the device plugin's Allocate and the DRA driver's
prepare give it, and what the administrator's pod asks with (issue 43 item 1).

Why here: gpu-device and the DRA driver write these into containers; container-edit (through the runtime wrapper),
MetaX's runtime inside the container and the exporter read them. The names are MetaX's runtime interface, so
they are spelled once, in the wire. The variable a pod asks for an MXMACA version with is
`metax_core.versions.ENV_VAR`, beside the parser of its value.
"""

from __future__ import annotations

VISIBLE_DEVICES = "METAX_VISIBLE_DEVICES"
"""The GPUs' PCI addresses, comma-separated."""
SGPU_QOS_POLICY = "METAX_SGPU_QOS_POLICY"
"""An sGPU container's QoS policy (`metax_core.node.devices.QosPolicy`)."""
SGPU_SHARES = "METAX_SGPU_SHARES"
"""An sGPU container's shares, ``<address>=<shares>,…``."""
SGPU_SHARES_PER_GPU = "METAX_SGPU_SHARES_PER_GPU"
"""How many sGPU shares each GPU is split into (also gpu-device's own setting, `agent_env.SGPU_SHARES`)."""
