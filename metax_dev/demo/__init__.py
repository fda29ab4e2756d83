"""`./run demo`: the operator and every node agent in one process on fake GPU hosts (see `cli`).

Modules: `fleet` (the in-memory cluster, the fake hosts, the operator), `kubelet` and `standins` (what stands in
for the kubelet, the DaemonSet controller, the device manager and container-runtime), `scenario` (the
administrator's steps and their checks), `view` (the live table), `cli` (the command line).
"""

from __future__ import annotations

from metax_dev.demo.cli import main

__all__ = ["main"]
