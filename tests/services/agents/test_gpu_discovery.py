"""gpu-discovery on a fake host and the in-memory cluster (issue 38 item 3, R-SECURITY, R-LABELS).

gpu-label's unprivileged half: on every node it sets ``gpu.installed`` where the PCI functions hold MetaX GPUs and
nothing else; where there are none it removes gpu-label's labels (the GPUs went, and gpu-label's pod with its
label). It writes no host file and publishes no readiness signal; a sysfs it cannot read and an uninstall request
leave the labels alone; the steady state and a restart write nothing.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

from metax_core.errors import HardwareError
from metax_core.inventory import PciFunction
from metax_core.node import labels, uninstall
from metax_hw_fake import builder
from services.gpu_label import agent, bootstrap, config, discovery

from .conftest import NAMESPACE, NODE, Node, make_node


def discoverer(n: Node, devices: object | None = None, probe: pathlib.Path | None = None) -> discovery.Discovery:
    s = config.Settings(
        node_name=NODE, host_root=n.root, namespace=NAMESPACE, probe_file=None if probe is None else str(probe)
    )
    hw = discovery.Hardware(devices if devices is not None else n.fake.devices)  # type: ignore[arg-type]
    return discovery.RECIPE.bootstrap(s, hw=hw, ports=n.ports(discovery.COMPONENT), clock=n.clock)


def labeller(n: Node) -> agent.GpuLabel:
    s = config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE)
    return bootstrap.bootstrap(s, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("gpu-label"), clock=n.clock)


def host_files(root: pathlib.Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*") if p.is_file()}


def test_a_gpu_node_gets_gpu_installed_and_nothing_else(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    before = host_files(n.root)
    probe = tmp_path / "ready"
    discoverer(n, probe=probe).tick()
    ours = {k: v for k, v in n.labels().items() if k.startswith(labels.PREFIX)}
    assert ours == {labels.GPU_INSTALLED: labels.TRUE}
    assert n.labels()["team"] == "ml"
    assert not any(k.startswith(labels.PREFIX) for k in n.annotations())
    assert n.board.read_all() == {}  # no readiness signal: gpu-label's own is the component's
    assert host_files(n.root) == before
    assert probe.read_text() == "labels published\n"


def test_a_node_without_gpus_gets_no_label_and_loses_gpu_labels_left_behind(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(0).host_driver(None))
    left = {labels.GPU_INSTALLED: labels.TRUE, labels.GPU_COUNT: "2", labels.GPU_PRODUCT: "C500"}
    n.k8s.node_metadata.patch_node_metadata(NODE, labels=left)
    discoverer(n).tick()
    got = n.labels()
    assert not any(k in got for k in labels.OWNED_LABELS)
    assert got["team"] == "ml"  # another writer's label stays


def test_steady_state_and_a_restart_write_nothing_next_to_gpu_label(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    d = discoverer(n)
    d.tick()
    labeller(n).tick()  # gpu-label's labels, gpu.installed among them: the same value, another field manager
    writes = n.writes()
    for _ in range(5):
        n.clock.advance(11)
        d.tick()
    discoverer(n).tick()
    assert n.writes() == writes
    assert n.labels()[labels.GPU_COUNT] == "2"


class Unreadable:
    """A sysfs read that fails (an unmounted /sys, an I/O error)."""

    def functions(self) -> Iterator[PciFunction]:
        raise HardwareError("read the PCI functions", None, "Input/output error")


def test_an_unreadable_sysfs_keeps_the_labels_and_is_not_ready(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2))
    probe = tmp_path / "ready"
    discoverer(n).tick()
    writes = n.writes()
    broken = discoverer(n, Unreadable(), probe)
    broken.tick()
    assert n.labels()[labels.GPU_INSTALLED] == labels.TRUE
    assert not probe.exists()
    assert n.writes() == writes


def test_during_uninstall_it_leaves_the_labels_to_the_finalizer(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(0).host_driver(None))
    n.k8s.node_metadata.patch_node_metadata(NODE, labels={labels.GPU_INSTALLED: labels.TRUE})
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request("uid-1"))
    writes = n.writes()
    discoverer(n).tick()
    assert n.writes() == writes  # no answer either: it has nothing on the host to undo
    assert n.labels()[labels.GPU_INSTALLED] == labels.TRUE
