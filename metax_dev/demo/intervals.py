"""The demo's round intervals: shorter than production (10-60 s) so the demo converges in seconds.

Why a module of its own: both kubelets of the demo give them to the agents they start, the in-process one
(`metax_dev.demo.kubelet`) and the image entrypoint stand-in a real-cluster node runs
(`metax_dev.demo.entrypoint`), and the latter is imported by every agent process, so it stays this small.
"""

from __future__ import annotations

from collections.abc import Mapping

from metax_core.wire import agent_env

FAST: Mapping[str, str] = {
    agent_env.LABEL_INTERVAL: "2",  # gpu-label's rounds, and gpu-device's label reads
    agent_env.DRIVER_INTERVAL: "2",
    agent_env.VFIO_INTERVAL: "2",
    agent_env.MACA_INTERVAL: "3",
    agent_env.TOPO_INTERVAL: "10",
    agent_env.INVENTORY_INTERVAL: "1",
    agent_env.READINESS_INTERVAL: "0.5",
    agent_env.TICK: "0.1",
}
"""A watched object's change starts a round at once anyway; nothing else differs from the pod's environment."""
