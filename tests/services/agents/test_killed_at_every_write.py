"""Every host write of driver-manager and vfio-manager is restartable: the agent is killed at each of its
sysfs writes in turn (the write raises a BaseException, as a SIGKILL ends the process: no cleanup code of
ours runs), then a fresh agent starts on the same host and must converge, with the fake kernel's invariants
intact (`FakeHost.audit`) and nothing half-applied.

The fake host's adapters are rebuilt with a writer that counts writes and dies at the chosen one; everything
else (the real sysfs adapter, the fake kernel's effects) is as in the other tests.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from metax_core.node import vfio, vfio_config_map
from metax_core.spec.model import VfioConfigEntry
from metax_hw import host
from metax_hw_fake import builder
from services.driver_manager import agent as driver_agent
from services.driver_manager import bootstrap as driver_bootstrap
from services.driver_manager import config as driver_config
from services.vfio_manager import agent as vfio_agent
from services.vfio_manager import bootstrap as vfio_bootstrap
from services.vfio_manager import config as vfio_config

from .conftest import NAMESPACE, NODE, PAYLOAD_VERSION, Node, make_node


class Killed(BaseException):
    """The process died here."""


def dying_host(n: Node, at: int | None) -> tuple[host.Host, list[int]]:
    count = [0]

    def write(path: pathlib.Path, value: str) -> None:
        if at is not None and count[0] == at:
            raise Killed(f"killed at write {at}: {path} <- {value!r}")
        count[0] += 1
        n.fake.kernel.write(path, value)

    hw = host.open_host(n.fake.root, writer=write, tool_path=[str(n.fake.bin_dir)], net_source=host.NetSource.SYSFS)
    return hw, count


def run_killed_then_restarted(
    tmp_path: pathlib.Path,
    spec: Callable[[], builder.FakeHostBuilder],
    prepare: Callable[[Node], None],
    round_with: Callable[[Node, host.Host], None],
    converged: Callable[[Node], None],
) -> int:
    """Count the writes of one clean round, then kill at each and check a restart converges."""
    clean = make_node(tmp_path / "clean", spec())
    prepare(clean)
    hw, count = dying_host(clean, None)
    round_with(clean, hw)
    converged(clean)
    writes = count[0]
    assert writes > 0
    for at in range(writes):
        n = make_node(tmp_path / f"kill-{at}", spec())
        prepare(n)
        with pytest.raises(Killed):
            round_with(n, dying_host(n, at)[0])
        assert n.fake.audit() == [], f"killed at write {at}"
        round_with(n, n.fake.hw)  # the restarted agent
        converged(n)
        assert n.fake.audit() == [], f"restart after write {at}"
    return writes


def test_driver_manager_vf_change_killed_at_every_write(tmp_path: pathlib.Path) -> None:
    def spec() -> builder.FakeHostBuilder:
        return builder.FakeHostBuilder().gpus(2).host_driver(PAYLOAD_VERSION).vfs(2)

    def prepare(n: Node) -> None:
        n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 4\n"})

    def round_with(n: Node, hw: host.Host) -> None:
        settings = driver_config.Settings(
            node_name=NODE,
            host_root=n.root,
            namespace=NAMESPACE,
            payload_version=PAYLOAD_VERSION,
            payload_dir=str(n.payload),
            host_module_tools=False,
        )
        driver_bootstrap.bootstrap(settings, hw=driver_agent.Hardware.of(hw), ports=n.ports("driver")).tick()

    def converged(n: Node) -> None:
        assert [len(n.fake.vfs_of(pf)) for pf in n.fake.gpu_addresses()] == [4, 4]
        assert n.board.read_all()["driver"].ready

    assert run_killed_then_restarted(tmp_path, spec, prepare, round_with, converged) >= 4


def test_vfio_manager_binds_killed_at_every_write(tmp_path: pathlib.Path) -> None:
    def spec() -> builder.FakeHostBuilder:
        return builder.FakeHostBuilder().gpus(3).vfio()

    def prepare(n: Node) -> None:
        n.config_map("metax-vfio-config", vfio_config_map.render([VfioConfigEntry(NODE, "0,2")]))
        n.fake.binder.bind(n.fake.gpu_addresses()[1], "vfio-pci")  # to be given back

    def round_with(n: Node, hw: host.Host) -> None:
        settings = vfio_config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE)
        vfio_bootstrap.bootstrap(settings, hw=vfio_agent.Hardware.of(hw), ports=n.ports("vfio-manager")).tick()

    def converged(n: Node) -> None:
        assert [n.fake.driver_of(a) for a in n.fake.gpu_addresses()] == ["vfio-pci", "metax", "vfio-pci"]
        assert n.annotations()[vfio.ANNOTATION] == '{"0":1,"2":1}'

    assert run_killed_then_restarted(tmp_path, spec, prepare, round_with, converged) >= 6
