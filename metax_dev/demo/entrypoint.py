"""``python -m metax_dev.demo.entrypoint NAME``: what an image's entrypoint runs on a real-cluster demo node.

Why a module of its own: on `metax-dev demo --cluster real` each GPU node is a process node standing for a GPU
node (docs/processnode.md, "Stand-ins for a GPU node"): it runs the pods the operator's DaemonSets create, and
for a container without ``command`` it runs the entrypoint its stand-ins name for the image. This is that
entrypoint: the agent's own ``__main__`` against the node's fake host (`metax_dev.agents`, what the canary
test runs), with the demo's short round intervals (`intervals.FAST`, as the in-memory demo's kubelet gives
them) where the pod's environment sets none. Two names are stand-ins of their own: ``container-runtime``
(no containerd to configure here: `standins.RuntimeStandIn` publishes its readiness and answers the
uninstall, through the pod's own ServiceAccount) and ``workload`` (a user's GPU container: it just runs;
its devices and its MXMACA edit are played by the demo's device manager, `metax_dev.demo.devices`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from metax_core.wire import agent_env
from metax_dev.demo import intervals

RUNTIME = "container-runtime"
WORKLOAD = "workload"


def _until_signalled() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return stop


def _runtime() -> int:
    from metax_dev.demo import standins
    from metax_k8s import client, connect

    env = os.environ
    api = client.HttpApi(connect.connect(), user_agent="metax-demo-container-runtime")
    probe = Path(env.get(agent_env.PROBE_FILE) or Path(env.get("TMPDIR", "/tmp")) / "metax-agent-ready")
    standins.RuntimeStandIn(api, env["NODE_NAME"], Path(env[agent_env.HOST_ROOT]), probe).run(_until_signalled())
    return 0


def _workload() -> int:
    _until_signalled().wait()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for key, value in intervals.FAST.items():
        os.environ.setdefault(key, value)
    if args == [RUNTIME]:
        return _runtime()
    if args == [WORKLOAD]:
        return _workload()
    from metax_dev import agents

    return agents.main(args)


if __name__ == "__main__":
    sys.exit(main())
