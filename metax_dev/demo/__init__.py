"""`./run demo`: the operator and every node agent in one process on fake GPU hosts (see `cli`); with
``--cluster real`` the same scenario on the Go-built control plane (`realcli`).

Modules: `fleet` (what the scenario reads and acts on; the in-memory cluster, the fake hosts, the operator),
`kubelet` and `standins` (what stands in for the kubelet, the DaemonSet controller, the device manager and
container-runtime), `workload` (a GPU pod's devices and MXMACA edit), `scenario` (the administrator's steps and
their checks), `view` (the live table), `cli` (the command line); for the real cluster `realfleet` (process
nodes, kwok CPU nodes, the operator process), `devices` (the device manager over gRPC), `entrypoint` (the
images' entrypoint stand-in), `intervals`, `realcli`.
"""

from __future__ import annotations

from metax_dev.demo.cli import main

__all__ = ["main"]
