"""The real hardware adapter: sysfs, kmod tools and mx-smi behind the hardware port.

Every class here takes the host root (``/`` on a bare host, the host mount inside a container) and touches
nothing outside it except the tools it runs; `metax_hw.host.open_host` wires them together. The same code
runs against `metax_hw_fake`'s fake host, which injects only the sysfs write primitive and fake tools.
"""
