"""gpu-label on a fake host and the in-memory cluster (C2, R-LABELS, R-READY).

Covers: labels and HAMi's annotation appear; other writers' labels and the administrator's mode label stay;
hot-plug (a GPU removed), VF changes and health changes are followed; mx-smi hanging or printing garbage
keeps the last names and sizes (no flapping); a steady state makes no write; the readiness signal.
"""

from __future__ import annotations

import json
import pathlib

from metax_core.node import labels
from metax_hw_fake import builder
from services.gpu_label import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, Node, make_node


def labeller(n: Node) -> agent.GpuLabel:
    s = config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE)
    return bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("gpu-label"), clock=n.clock)


def test_labels_and_hami_annotation_appear_and_others_stay(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(4))
    n.k8s.node_metadata.patch_node_metadata(NODE, labels={labels.GPU_DEVICE_MODE: "sgpu"})
    labeller(n).tick()
    got = n.labels()
    assert got[labels.GPU_INSTALLED] == "true"
    assert got[labels.GPU_PRODUCT] == "C500"
    assert got[labels.GPU_FAMILY] == "xiyun"
    assert got[labels.GPU_COUNT] == "4"
    assert got[labels.GPU_MEMORY] == "65536"
    assert (got[labels.GPU_DRIVER_MAJOR], got[labels.GPU_DRIVER_MINOR], got[labels.GPU_DRIVER_PATCH]) == (
        "2",
        "18",
        "0",
    )
    assert (got[labels.GPU_SRIOV], got[labels.GPU_VFNUM]) == ("true", "0")
    assert got["team"] == "ml" and got[labels.GPU_DEVICE_MODE] == "sgpu"
    devices = json.loads(n.annotations()[labels.NODE_GPU_DEVICES])
    assert [d["bdf"] for d in devices] == n.fake.gpu_addresses()
    assert all(d["healthy"] and d["totalDevCount"] == 16 for d in devices)
    assert n.board.read_all()["gpu-label"].ready


def test_follows_vfs_health_and_hot_unplug(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    g = labeller(n)
    g.tick()
    first, second = n.fake.gpu_addresses()
    n.fake.binder.set_vf_count(first, 2)
    n.fake.binder.set_vf_count(second, 2)
    n.clock.advance(11)
    g.tick()
    assert n.labels()[labels.GPU_VFNUM] == "2"
    assert len(json.loads(n.annotations()[labels.NODE_GPU_DEVICES])) == 4  # VFs are shared instead of PFs
    n.fake.fall_off_bus(first)
    n.clock.advance(11)
    g.tick()
    entries = {d["bdf"]: d["healthy"] for d in json.loads(n.annotations()[labels.NODE_GPU_DEVICES])}
    assert entries[n.fake.vfs_of(second)[0]] is True
    assert not all(entries.values())
    n.fake.fall_off_bus(first, removed=True)
    n.clock.advance(11)
    g.tick()
    assert n.labels()[labels.GPU_COUNT] == "1"


def test_mx_smi_hanging_failing_or_garbage_keeps_the_last_names_and_sizes(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2), timeout=1.0)
    g = labeller(n)
    g.tick()
    before = (n.labels(), n.annotations())
    for mode in ("hang", "garbage", "fail"):
        n.fake.break_mx_smi(mode)
        n.clock.advance(11)
        g.tick()
        assert (n.labels(), n.annotations()) == before
    assert g.publisher.patches == 1


def test_no_gpu_node_gets_no_gpu_labels(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(0).host_driver(None))
    labeller(n).tick()
    assert labels.GPU_INSTALLED not in n.labels()
    assert n.board.read_all()["gpu-label"].ready


def test_steady_state_writes_nothing(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(4))
    g = labeller(n)
    g.tick()
    writes = n.writes()
    for _ in range(10):
        n.clock.advance(11)
        g.tick()
    assert n.writes() == writes
    assert (g.publisher.patches, g.publisher.signal_writes) == (1, 1)


def test_restarted_labeller_writes_nothing_new(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    labeller(n).tick()
    writes = n.writes()
    again = labeller(n)
    again.tick()
    assert n.writes() == writes and again.publisher.patches == 0


def test_the_probe_file_exists_only_while_the_labels_are_published(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    probe_file = tmp_path / "ready"
    s = config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE, probe_file=str(probe_file))
    m = bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("gpu-label"), clock=n.clock)
    m.tick()
    assert n.labels()[labels.GPU_COUNT] == "2"
    assert probe_file.read_text() == "labels published\n"
    n.k8s.api.delete("v1", "Node", NODE)  # nothing to label: not doing its job
    m.wake()
    m.tick()
    assert not probe_file.exists()
    m.shutdown()
    assert not probe_file.exists()
