"""gpu-device (C3): the kubelet device plugin for MetaX GPUs, with health checks and CDI spec writing.

`agent` is the control loop, `config` its settings, `bootstrap` wires real or fake adapters, `__main__`
runs it until SIGTERM. Decisions live in `metax_core.node.devices`, `metax_core.node.cdi` and
`metax_core.node.readiness`.
"""
