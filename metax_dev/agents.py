"""Run a node agent as a local process against a fake GPU host: ``python -m metax_dev.agents <agent>``.

Why: end-to-end tests and developers run gpu-label, driver-manager, vfio-manager, gpu-device and maca next to kwok
nodes, one set per fake host. The agents' own ``__main__`` builds the real hardware adapters, whose sysfs
writes on a fake root would only change files; here the same agents get the fake host's adapters (the real
`metax_hw` code with the fake kernel's write primitive, `metax_hw_fake.host.FakeHost.hw`) and everything
else from the environment exactly as in production (settings, KUBECONFIG, watches, SIGTERM). The product
never imports this module.
"""

from __future__ import annotations

import os
import pathlib
import sys
import threading
from collections.abc import Callable, Mapping

from metax_core.wire import agent_env

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from metax_core.node import payload_layout
from metax_hw_fake import host as fake_host
from services._agent import loop

# Each function imports only its own agent, so a process's memory is that agent's (benchmarks/agents.py).

Built = tuple[loop.Agent, Callable[[threading.Event], None]]


def _fake(environ: Mapping[str, str]) -> fake_host.FakeHost:
    return fake_host.FakeHost.open(environ[agent_env.HOST_ROOT])


def gpu_label(environ: Mapping[str, str]) -> Built:
    from services.gpu_label import agent as label_agent
    from services.gpu_label import bootstrap as label_bootstrap
    from services.gpu_label import config as label_config

    settings = label_config.from_env(environ)
    agent = label_bootstrap.bootstrap(settings, hw=label_agent.Hardware.of(_fake(environ).hw))
    return agent, label_bootstrap.runner(agent)


def gpu_discovery(environ: Mapping[str, str]) -> Built:
    from services.gpu_label import discovery

    settings = discovery.RECIPE.settings(environ)
    agent = discovery.RECIPE.bootstrap(settings, hw=discovery.Hardware(_fake(environ).hw.devices))
    return agent, discovery.RECIPE.runner(agent)


def driver_manager(environ: Mapping[str, str]) -> Built:
    from services.driver_manager import agent as driver_agent
    from services.driver_manager import bootstrap as driver_bootstrap
    from services.driver_manager import config as driver_config

    settings = driver_config.from_env(environ, host_module_tools=False)
    agent = driver_bootstrap.bootstrap(settings, hw=driver_agent.Hardware.of(_fake(environ).hw))
    return agent, driver_bootstrap.runner(agent)


def vfio_manager(environ: Mapping[str, str]) -> Built:
    from services.vfio_manager import agent as vfio_agent
    from services.vfio_manager import bootstrap as vfio_bootstrap
    from services.vfio_manager import config as vfio_config

    settings = vfio_config.from_env(environ)
    agent = vfio_bootstrap.bootstrap(settings, hw=vfio_agent.Hardware.of(_fake(environ).hw))
    return agent, vfio_bootstrap.runner(agent)


def gpu_device(environ: Mapping[str, str]) -> Built:
    from services.gpu_device import bootstrap as device_bootstrap
    from services.gpu_device import config as device_config

    hw = _fake(environ).hw
    agent = device_bootstrap.bootstrap(device_config.from_env(environ), inventory=hw.devices, monitor=hw.monitor)
    return agent, agent.run


def maca(environ: Mapping[str, str]) -> Built:
    """maca has no hardware port: its host is the fake host's root (its SDK versions, records, runc state)."""
    from services.maca import bootstrap as maca_bootstrap
    from services.maca import config as maca_config

    agent = maca_bootstrap.bootstrap(maca_config.from_env(environ))
    return agent, maca_bootstrap.runner(agent)


#: The payload driver version `write_payload` ships by default (the fake host's own driver is older, 2.18.0).
PAYLOAD_VERSION = "2.20.0"

#: Each agent's intervals for tests: rounds every few seconds instead of the production 10-30 s.
FAST: Mapping[str, Mapping[str, str]] = {
    "gpu-label": {agent_env.LABEL_INTERVAL: "3"},
    "gpu-discovery": {agent_env.LABEL_INTERVAL: "3"},
    "driver-manager": {agent_env.DEPLOY_POLICY.name: "PreferCloud", agent_env.DRIVER_INTERVAL: "5"},
    "vfio-manager": {agent_env.VFIO_INTERVAL: "10"},
    # maca's payload directory is not the driver's (each has its own pod): no SDK images unless a test gives some.
    "maca": {agent_env.MACA_INTERVAL: "3", agent_env.PAYLOAD_DIR: "/nonexistent-maca-payload"},
    "gpu-device": {
        agent_env.HEALTHY_INTERVAL.name: "3",
        agent_env.INVENTORY_INTERVAL: "1",
        agent_env.READINESS_INTERVAL: "0.5",
        agent_env.LABEL_INTERVAL: "2",
    },
}


BROKEN_KERNEL = "6.99.0-0-broken"
"""A kernel release no fake host runs: a payload built for it is refused with ``Invalid module format``."""


def write_payload(
    directory: pathlib.Path, version: str = PAYLOAD_VERSION, *, built_for: str | None = None
) -> pathlib.Path:
    """A driver image's payload (``driver/metax.ko`` of ``version`` and the fake host's ``bin/mx-smi``, which runs
    in a pod too: `metax_hw_fake.builder.portable_tool`) under ``directory``, driver-manager's
    ``METAX_PAYLOAD_DIR``; returns ``directory``. ``built_for`` another kernel release (`BROKEN_KERNEL`):
    the fake host's kernel refuses the module, as a real one refuses a module built for another kernel."""
    from metax_hw_fake import builder, kmods  # not in the agents' processes (benchmarks/agents.py measures them)

    kmods.write_module_file(
        directory / "driver" / "metax.ko",
        "metax",
        version,
        "metax",
        [(0x9999, -1)],
        dict(builder.METAX_PARAMS),
        vermagic=kmods.vermagic(built_for) if built_for else None,
    )
    smi = directory / payload_layout.TOOLS_SUBDIR / "mx-smi"  # the driver's tool comes with it
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(builder.portable_tool("mx-smi"))
    smi.chmod(0o755)
    return directory


def environment(
    fake: fake_host.FakeHost, *, node_name: str, kubeconfig: pathlib.Path, namespace: str, payload: pathlib.Path
) -> dict[str, str]:
    """What every agent of one node reads (the fake host's tools first on PATH, a short tick, INFO logs);
    add `FAST` [agent] for test intervals. Never in-cluster: the agents use ``kubeconfig``."""
    env = {
        **fake.env(),
        "KUBECONFIG": str(kubeconfig),
        "NODE_NAME": node_name,
        agent_env.HOST_ROOT: str(fake.root),
        agent_env.NAMESPACE: namespace,
        agent_env.DRIVER_VERSION.name: PAYLOAD_VERSION,
        agent_env.PAYLOAD_DIR: str(payload),
        agent_env.TICK: "0.2",
        agent_env.RESYNC: "60",
        agent_env.LOG_LEVEL: "INFO",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1]),
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def command(agent: str) -> list[str]:
    """The command line that runs ``agent`` (a key of `AGENTS`) on the fake host named by METAX_HOST_ROOT."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")
    return [sys.executable, "-m", "metax_dev.agents", agent]


AGENTS: Mapping[str, Callable[[Mapping[str, str]], Built]] = {
    "gpu-discovery": gpu_discovery,
    "gpu-label": gpu_label,
    "driver-manager": driver_manager,
    "vfio-manager": vfio_manager,
    "gpu-device": gpu_device,
    "maca": maca,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in AGENTS:
        print(
            f"usage: python -m metax_dev.agents {{{','.join(AGENTS)}}}  (METAX_HOST_ROOT: a fake host)", file=sys.stderr
        )
        return 2
    return loop.main(args[0], AGENTS[args[0]], [])


if __name__ == "__main__":
    sys.exit(main())
