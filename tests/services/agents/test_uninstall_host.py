"""Uninstall on one node: the five agents undo what they did, and the host is as it was found (R-INSTALL).

A fake host and the in-memory cluster; gpu-label, driver-manager (PreferCloud payload over the host's own
driver, with module parameters and VFs from driver-config), vfio-manager (a VF on vfio-pci), gpu-device
(plugin servers registered with the test kubelet, a CDI spec) and maca (two MXMACA versions installed from
fake payload images) run their rounds until the node is in use, then
the finalizer's request lands on the Node. Covers: every agent answers (`metax_core.node.uninstall`), its
own annotations and readiness signal are gone, the host tree is byte-identical to before install (the fake's
own area aside, `metax_hw_fake.snapshot`) with the host's module and parameters back; agents that keep
running after they answered write nothing and change nothing, also once the finalizer removed the request
and driver-config; the host that had no driver before install
gets the payload's module unloaded; a module in use stays, and the answer says so; an undo killed midway
(after the unload, before the reload) completes on restart from the first-touch record; the firmware
copies driver-manager staged go while the host's own images stay (the flashed VBIOS stays, documented).
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from metax_core.node import labels, readiness, uninstall, vfio, vfio_config_map
from metax_core.spec import model as spec_model
from metax_core.spec.model import VfioConfigEntry
from metax_dev import fake_sdk
from metax_dev.devicekubelet import Kubelet
from metax_hw_fake import builder, snapshot
from services.driver_manager import agent as driver_agent
from services.driver_manager import bootstrap as driver_bootstrap
from services.driver_manager import config as driver_config
from services.gpu_device import bootstrap as device_bootstrap
from services.gpu_device import config as device_config
from services.gpu_label import agent as label_agent
from services.gpu_label import bootstrap as label_bootstrap
from services.gpu_label import config as label_config
from services.maca import bootstrap as maca_bootstrap
from services.maca import config as maca_config
from services.vfio_manager import agent as vfio_agent
from services.vfio_manager import bootstrap as vfio_bootstrap
from services.vfio_manager import config as vfio_config

from .conftest import NAMESPACE, NODE, PAYLOAD_VERSION, Node, make_node, write_payload

UID = "cluster-operator-uid"
HOST_PARAMS = {"xcore_page_size": "0"}
STAYS = {"run/cdi": "dir 0o755"}
"""Documented to stay (docs/operator.md, "Uninstall"): the CDI spec directory, empty, on the /run tmpfs."""
STAND_INS = ("container-runtime",)
"""Readiness signals of components without agents yet: the test publishes and withdraws them, as they will."""


class Agents:
    def __init__(self, n: Node) -> None:
        self.n = n
        common = {"node_name": NODE, "host_root": n.root, "namespace": NAMESPACE}
        self.label = label_bootstrap.bootstrap(
            label_config.Settings(**common),  # type: ignore[arg-type]
            hw=label_agent.Hardware.of(n.fake.hw),
            ports=n.ports("gpu-label"),
            clock=n.clock,
        )
        self.driver = driver_manager(n)
        self.vfio = vfio_bootstrap.bootstrap(
            vfio_config.Settings(**common),  # type: ignore[arg-type]
            hw=vfio_agent.Hardware.of(n.fake.hw),
            ports=n.ports("vfio-manager"),
            clock=n.clock,
        )
        images = []
        for i, version in enumerate(("2.18.0.3", "2.9.1")):  # the payload images outside the host root
            archive = fake_sdk.write_payload_image(n.payload.parent / "maca-images", version)
            fake_sdk.unpack_payload(archive, n.payload.parent / "maca-payload" / str(i))
            images.append(fake_sdk.reference(version))
        self.maca = maca_bootstrap.bootstrap(
            maca_config.Settings(**common, payload_dir=n.payload.parent / "maca-payload", payload_images=tuple(images)),  # type: ignore[arg-type]
            ports=n.ports("maca"),
            clock=n.clock,
        )
        self.device = device_bootstrap.bootstrap(
            device_config.Settings(**common, healthy_interval=0),  # type: ignore[arg-type]
            inventory=n.fake.devices,
            monitor=n.fake.monitor,
            nodes=n.k8s.node_metadata,
            clock=n.clock,
        )

    def rounds(self, count: int = 3, *, device: bool = True, others: bool = True) -> None:
        """Rounds of every agent. The agents that run tools (``sh`` forks) never tick while gRPC servers run in
        this process: in production they are processes of their own, and a fork beside gRPC threads is not safe."""
        for _ in range(count):
            if device:
                self.device.tick()
            if others:
                self.label.tick()
                self.driver.tick()
                self.vfio.tick()
                self.maca.tick()
            self.n.clock.advance(60)
            for a in (self.label, self.driver, self.vfio, self.maca):
                a.wake()


def driver_manager(n: Node, **overrides: object) -> driver_agent.DriverManager:
    s = driver_config.Settings(
        node_name=NODE,
        host_root=n.root,
        namespace=NAMESPACE,
        payload_version=PAYLOAD_VERSION,
        payload_dir=str(n.payload),
        host_module_tools=False,
        **overrides,  # type: ignore[arg-type]
    )
    return driver_bootstrap.bootstrap(s, hw=driver_agent.Hardware.of(n.fake.hw), ports=n.ports("driver"), clock=n.clock)


@pytest.fixture
def short_tmp() -> Iterator[pathlib.Path]:
    """A short directory: unix socket paths hold at most 107 bytes."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="un", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def in_use(n: Node) -> tuple[Agents, Kubelet]:
    """Every agent has done its job on the node (the state the uninstall starts from)."""
    n.config_map(
        "driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n", "module-params": "xcore_page_size: 4\n"}
    )
    n.config_map("metax-vfio-config", vfio_config_map.render([VfioConfigEntry(NODE, "0")]))
    for component in STAND_INS:
        n.board.publish(readiness.ComponentReadiness(component, True, "stand-in"))
    agents = Agents(n)
    agents.rounds(device=False)
    kubelet = start_kubelet(n)
    agents.rounds(2, others=False)
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    assert (n.fake.module_params("metax") or {})["xcore_page_size"] == "4"
    assert len(n.fake.vfs_of(n.fake.gpu_addresses()[0])) == 2
    assert n.annotations()[vfio.ANNOTATION] == '{"0":1}'
    assert labels.NODE_GPU_DEVICES in n.annotations()
    assert kubelet.registered("metax-tech.com/gpu") >= 1
    assert any((n.root / "run/cdi").iterdir())
    assert sorted(p.name for p in (n.root / "var/lib/metax/maca").iterdir()) == ["2.18.0.3", "2.9.1"]
    return agents, kubelet


def request(n: Node) -> None:
    for component in STAND_INS:
        n.board.withdraw(component)
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request(UID))
    assert uninstall.requested(n.annotations()) == UID


def host(**driver: object) -> builder.FakeHostBuilder:
    return builder.FakeHostBuilder().gpus(2).host_driver("2.18.0", **driver)  # type: ignore[arg-type]


def start_kubelet(n: Node) -> Kubelet:
    return Kubelet(n.root / "var/lib/kubelet/device-plugins").start()


def test_the_host_is_as_found_after_every_agent_answered(short_tmp: pathlib.Path) -> None:
    n = make_node(short_tmp, host(params=HOST_PARAMS))
    (n.root / "var/lib/kubelet/device-plugins").mkdir(parents=True)  # the kubelet's, there before install
    before = snapshot.take(n.root)
    module_before = (n.fake.module_version("metax"), n.fake.module_params("metax"))
    agents, kubelet = in_use(n)
    try:
        assert snapshot.diff(before, snapshot.take(n.root))  # the install changed the host
        request(n)
        agents.rounds(1, others=False)
        assert kubelet.wait_for(lambda: not kubelet.connected("metax-tech.com/gpu"), what="streams end")
    finally:
        kubelet.stop()
    (n.root / "var/lib/kubelet/device-plugins/kubelet.sock").unlink(missing_ok=True)  # the test kubelet's own
    agents.rounds(2)
    got = uninstall.answers(n.annotations())
    assert got == {a: uninstall.Done(UID) for a in uninstall.AGENTS if a not in STAND_INS}
    assert vfio.ANNOTATION not in n.annotations() and labels.NODE_GPU_DEVICES not in n.annotations()
    assert n.board.read_all() == {}
    assert snapshot.diff({**before, **STAYS}, snapshot.take(n.root)) == []
    assert (n.fake.module_version("metax"), n.fake.module_params("metax")) == module_before
    assert [n.fake.driver_of(a) for a in n.fake.gpu_addresses()] == ["metax", "metax"]
    assert n.fake.audit() == []

    writes = n.writes()
    agents.rounds(2)  # still running after they answered: quiet, and nothing comes back
    assert n.writes() == writes
    assert snapshot.diff({**before, **STAYS}, snapshot.take(n.root)) == []

    # the finalizer's end: driver-config gone, the request and the answers removed; the agents (their pods
    # being deleted) must not take that for "carry on" and load the payload driver again
    n.k8s.objects.delete("v1", "ConfigMap", "driver-config", NAMESPACE)
    ours = [k for k in n.annotations() if k.startswith(uninstall.PREFIX)]
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations=dict.fromkeys(ours))
    agents.rounds(2)
    assert [k for k in n.annotations() if k.startswith(uninstall.PREFIX)] == []
    assert snapshot.diff({**before, **STAYS}, snapshot.take(n.root)) == []
    assert (n.fake.module_version("metax"), n.fake.module_params("metax")) == module_before


def test_a_host_without_a_driver_before_install_gets_the_payloads_module_unloaded(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).host_driver(None))
    before = snapshot.take(n.root)
    m = driver_manager(n)
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    request(n)
    m.wake()
    m.tick()
    assert n.fake.module_version("metax") is None
    assert [n.fake.driver_of(a) for a in n.fake.gpu_addresses()] == [None, None]
    assert uninstall.answers(n.annotations())["driver"] == uninstall.Done(UID)
    assert snapshot.diff(before, snapshot.take(n.root)) == []


def test_a_module_in_use_stays_and_the_answer_says_so(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).host_driver(None))
    m = driver_manager(n)
    m.tick()
    n.fake.hold_module("metax")
    request(n)
    m.wake()
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    kept = uninstall.answers(n.annotations())["driver"].kept
    assert len(kept) == 1 and "metax module" in kept[0]
    assert (n.root / "var/lib/metax/driver-manager/baseline.json").is_file()  # kept to try again from


def test_an_undo_killed_after_the_unload_completes_on_restart(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(params=HOST_PARAMS))
    before = snapshot.take(n.root)
    params_before = n.fake.module_params("metax")
    m = driver_manager(n)
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    request(n)
    n.fake.hw.modules.unload("metax")  # where a killed undo stops: payload module gone, host one not back
    restarted = driver_manager(n)
    restarted.tick()
    assert n.fake.module_version("metax") == "2.18.0" and n.fake.module_params("metax") == params_before
    assert uninstall.answers(n.annotations())["driver"] == uninstall.Done(UID)
    assert snapshot.diff(before, snapshot.take(n.root)) == []


def test_firmware_copies_go_and_the_hosts_own_images_stay(tmp_path: pathlib.Path) -> None:
    spec = builder.FakeHostBuilder().gpus(2).host_driver("2.18.0").vbios("1.13.0.0").firmware_image("1.13.0.0")
    n = make_node(tmp_path, spec)
    write_payload(n.payload, firmware="1.14.0.0")
    before = snapshot.take(n.root)
    m = driver_manager(n, fw_upgrade_policy=spec_model.FirmwarePolicy.PREFER_CLOUD)
    m.tick()
    copies = sorted(str(p.relative_to(n.root)) for p in (n.root / "lib/firmware/metax").rglob("mxvbios-1.14*"))
    assert copies and n.fake.vbios(n.fake.gpu_addresses()[0]) == ("1.13.0.0", "1.14.0.0")
    request(n)
    m.wake()
    m.tick()
    assert uninstall.answers(n.annotations())["driver"] == uninstall.Done(UID)
    assert snapshot.diff(before, snapshot.take(n.root)) == []  # the copies gone, the host's own image kept
    assert n.fake.vbios(n.fake.gpu_addresses()[0]) == ("1.13.0.0", "1.14.0.0")  # flashed: stays (documented)


def test_the_driver_waits_for_vfio_manager_so_every_gpu_keeps_its_device_nodes(tmp_path: pathlib.Path) -> None:
    """driver-manager's round comes first after the request (as it may, both wake on the Node): it waits for
    vfio-manager; had it reloaded the host's module first, the GPU vfio-manager gives back later would be probed
    last, under another /dev/dri/cardN than before install (found by `./run demo` on 4 nodes)."""
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(3).host_driver("2.18.0"))
    before = snapshot.take(n.root)
    n.config_map("metax-vfio-config", vfio_config_map.render([VfioConfigEntry(NODE, "0")]))
    common = {"node_name": NODE, "host_root": n.root, "namespace": NAMESPACE}
    binder = vfio_bootstrap.bootstrap(
        vfio_config.Settings(**common),  # type: ignore[arg-type]
        hw=vfio_agent.Hardware.of(n.fake.hw),
        ports=n.ports("vfio-manager"),
        clock=n.clock,
    )
    m = driver_manager(n)
    m.tick()
    binder.tick()
    first = n.fake.gpu_addresses()[0]
    assert n.fake.driver_of(first) == "vfio-pci" and n.fake.module_version("metax") == PAYLOAD_VERSION
    request(n)
    for agent in (m, binder):
        agent.wake()
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION and "driver" not in uninstall.answers(n.annotations())
    binder.tick()
    m.wake()
    m.tick()
    assert set(uninstall.answers(n.annotations())) == {"vfio-manager", "driver"}
    assert [n.fake.driver_of(a) for a in n.fake.gpu_addresses()] == ["metax"] * 3
    assert snapshot.diff(before, snapshot.take(n.root)) == []
