"""driver-manager (C5): the kernel driver, its parameters, VF counts and firmware on one node.

`config` its settings, `payload` copies the payload's driver and firmware onto the host, `agent` is the
round (gather → `metax_core.node.driver_plan` / `driver_config` / `policy` decide → act through the hardware
port → publish), `bootstrap` wires real or fake adapters, `__main__` runs it until SIGTERM.
"""
