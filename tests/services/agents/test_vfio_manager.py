"""vfio-manager on a fake host and the in-memory cluster (C10, R-VFIO, R-KUBEVIRT).

Covers: selection by node regex and index (PFs, VFs when virtualisation is on), ``all``; the annotation;
unselected GPUs returned to metax; an IOMMU group shared with an unselected GPU; a bind that fails is
retried with back-off; the readinessProbe file only while the selection is applied;
IOMMU off says IOMMUDisabled; an invalid ConfigMap keeps the last selection;
vfio-pci loaded when needed; killed mid-bind then restarted; a steady state that writes nothing.
"""

from __future__ import annotations

import pathlib

from metax_core.node import vfio, vfio_config_map
from metax_core.spec.model import VfioConfigEntry
from metax_hw_fake import builder
from services.vfio_manager import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, Node, make_node


def manager(n: Node, probe_file: pathlib.Path | None = None) -> agent.VfioManager:
    s = config.Settings(
        node_name=NODE, host_root=n.root, namespace=NAMESPACE, probe_file=probe_file and str(probe_file)
    )
    return bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("vfio-manager"), clock=n.clock)


def select(n: Node, *entries: tuple[str, str]) -> None:
    n.config_map("metax-vfio-config", vfio_config_map.render([VfioConfigEntry(a, b) for a, b in entries]))


def drivers(n: Node) -> list[str | None]:
    return [n.fake.driver_of(a) for a in n.fake.gpu_addresses()]


def test_selected_gpus_bind_and_unselected_return(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(4))
    select(n, ("other-node", "all"), ("gpu-node-\\d+", "0,2,7"))
    m = manager(n)
    m.tick()
    assert drivers(n) == ["vfio-pci", "metax", "vfio-pci", "metax"]
    assert n.annotations()[vfio.ANNOTATION] == '{"0":1,"2":1}'
    signal = n.board.read_all()["vfio-manager"]
    assert signal.ready, signal.reason
    select(n, ("gpu-node-1", "1"))
    m.wake()
    m.tick()
    assert drivers(n) == ["metax", "vfio-pci", "metax", "metax"]
    assert n.annotations()[vfio.ANNOTATION] == '{"1":1}'
    select(n)
    m.wake()
    m.tick()
    assert drivers(n) == ["metax"] * 4
    assert vfio.ANNOTATION not in n.annotations()
    assert n.fake.audit() == []


def test_vfs_are_indexed_when_virtualisation_is_on(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).vfs(2))
    select(n, ("gpu-node-1", "1"))
    manager(n).tick()
    vfs = n.fake.vfs_of(n.fake.gpu_addresses()[0])
    assert n.fake.driver_of(vfs[1]) == "vfio-pci"
    assert n.fake.driver_of(n.fake.gpu_addresses()[0]) == "metax"


def test_iommu_off_says_iommu_disabled(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).iommu(False))
    select(n, ("gpu-node-1", "all"))
    manager(n).tick()
    assert drivers(n) == ["metax", "metax"]
    assert n.annotations()[vfio.ANNOTATION] == '{"0":0,"1":0}'
    signal = n.board.read_all()["vfio-manager"]
    assert not signal.ready and signal.reason.startswith("IOMMUDisabled")
    assert "IOMMUDisabled" in n.reasons()


def test_the_probe_file_exists_only_while_the_selection_is_applied(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    probe_file = tmp_path / "ready"
    first = n.fake.gpu_addresses()[0]
    n.fake.refuse_bind(first, "vfio-pci")
    select(n, ("gpu-node-1", "all"))
    m = manager(n, probe_file)
    m.tick()
    assert not n.board.read_all()["vfio-manager"].ready
    assert not probe_file.exists()  # the agent runs, but the selection is not applied: the pod is not Ready
    n.fake.clear_faults()
    n.clock.advance(60)
    m.wake()
    m.tick()
    assert n.board.read_all()["vfio-manager"].ready
    assert probe_file.read_text().strip() == n.board.read_all()["vfio-manager"].reason
    m.shutdown()
    assert not probe_file.exists()


def test_a_failed_bind_is_retried_with_back_off(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    first = n.fake.gpu_addresses()[0]
    n.fake.refuse_bind(first, "vfio-pci")
    select(n, ("gpu-node-1", "all"))
    m = manager(n)
    m.tick()
    assert n.annotations()[vfio.ANNOTATION] == '{"0":0,"1":1}'
    assert n.fake.driver_of(first) == "metax"  # rolled back, not left unbound
    assert "VfioBindFailed" in n.reasons()
    n.fake.clear_faults()
    n.clock.advance(1)
    m.wake()
    m.tick()  # inside the back-off: not tried again
    assert n.annotations()[vfio.ANNOTATION] == '{"0":0,"1":1}'
    n.clock.advance(60)
    m.wake()
    m.tick()
    assert n.annotations()[vfio.ANNOTATION] == '{"0":1,"1":1}'


def test_a_foreign_group_mate_blocks_binding(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    n.fake.add_group_mate(n.fake.gpu_addresses()[0])
    select(n, ("gpu-node-1", "0"))
    manager(n).tick()
    assert n.annotations()[vfio.ANNOTATION] == '{"0":0}'
    assert "IOMMU group" in n.board.read_all()["vfio-manager"].reason


def test_an_invalid_config_keeps_the_last_selection(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    select(n, ("gpu-node-1", "0"))
    m = manager(n)
    m.tick()
    n.config_map("metax-vfio-config", {"vfioConfig": "- nodeName: '('\n  gpus: 'zero'\n"})
    m.wake()
    m.tick()
    assert drivers(n) == ["vfio-pci", "metax"]
    assert "InvalidVfioConfig" in n.reasons()


def test_killed_mid_bind_then_restarted_converges(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).vfio())
    first = n.fake.gpu_addresses()[0]
    n.fake.binder.unbind(first)  # killed after the unbind, before the probe
    select(n, ("gpu-node-1", "0"))
    manager(n).tick()
    assert drivers(n) == ["vfio-pci", "metax"]


def test_steady_state_writes_nothing(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    select(n, ("gpu-node-1", "0"))
    m = manager(n)
    m.tick()
    writes, dmesg = n.writes(), len(n.fake.dmesg())
    for _ in range(5):
        n.clock.advance(31)
        m.tick()
    assert (n.writes(), len(n.fake.dmesg())) == (writes, dmesg)
