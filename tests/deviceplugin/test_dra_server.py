"""The DRA driver's gRPC side (`metax_k8s.dra.server`, R-DRA) over real unix sockets, with grpc clients acting
as the kubelet (its plugin watcher and DRA manager); the real kubelet is in tests/realnode/test_dra.py.

- the regenerated code is the checked-in code, and the services are upstream's wire names;
- GetInfo names the plugin type, the driver, the endpoint and both DRAPlugin versions; the kubelet's
  NotifyRegistrationStatus reaches the service;
- prepare and unprepare through v1 and v1beta1 map every field both ways; a claim the service leaves out and
  a service that raises give per-claim errors, never a failed call;
- the health stream sends every device at once, again on a change, and ends when the client goes away;
- start replaces a killed process's stale sockets, stop removes both, and a restart in one process serves again.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

import grpc
import pytest

from metax_core.dra import DRIVER, model
from metax_k8s.dra import regen, server
from metax_k8s.dra.v1 import api_pb2 as v1
from metax_k8s.dra.v1 import api_pb2_grpc as v1_grpc
from metax_k8s.dra.v1beta1 import api_pb2 as v1beta1
from metax_k8s.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from metax_k8s.drahealth.v1alpha1 import api_pb2 as health_pb2
from metax_k8s.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from metax_k8s.pluginregistration.v1 import api_pb2 as reg_pb2
from metax_k8s.pluginregistration.v1 import api_pb2_grpc as reg_grpc

DEVICE = model.PreparedDevice("node-a", "gpu-0000-09-00-0", ("gpus",), ("metax-tech.com/claim=u1-gpu-0000-09-00-0",))
SHARED = model.PreparedDevice("node-a", "gpu-0000-0a-00-0", ("a", "b"), ("x=1", "x=2"), share_id="s-1")


class Service:
    """A preparer and health feed that records what the kubelet asked."""

    def __init__(self) -> None:
        self.prepared: list[list[model.ClaimRef]] = []
        self.unprepared: list[list[model.ClaimRef]] = []
        self.raise_on_prepare = False
        self.reports: tuple[model.DeviceHealthReport, ...] = (
            model.DeviceHealthReport("node-a", "gpu-1", model.HealthState.HEALTHY, "", 100.0, 30),
        )
        self.version = 1
        self.cond = threading.Condition()

    def prepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, model.ClaimOutcome]:
        self.prepared.append(list(claims))
        if self.raise_on_prepare:
            raise RuntimeError("disk on fire")
        out = {"u1": model.ClaimOutcome(devices=(DEVICE, SHARED)), "u2": model.ClaimOutcome.failed("not here")}
        return {c.uid: out[c.uid] for c in claims if c.uid in out}

    def unprepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, str]:
        self.unprepared.append(list(claims))
        return {c.uid: ("busy" if c.uid == "u2" else "") for c in claims}

    def current(self) -> tuple[Sequence[model.DeviceHealthReport], int]:
        with self.cond:
            return self.reports, self.version

    def wait_changed(self, version: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.version > version, timeout)

    def change(self, reports: tuple[model.DeviceHealthReport, ...]) -> None:
        with self.cond:
            self.reports, self.version = reports, self.version + 1
            self.cond.notify_all()


@pytest.fixture
def short_dir() -> Iterator[pathlib.Path]:
    """A short directory: a unix socket path may have at most 107 characters (pytest's tmp_path is longer)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def running(short_dir: pathlib.Path) -> Iterator[tuple[server.DraPluginServer, Service, list[tuple[bool, str]]]]:
    tmp_path = short_dir
    service = Service()
    said: list[tuple[bool, str]] = []
    s = server.DraPluginServer(
        DRIVER,
        plugin_dir=tmp_path / "plugins" / DRIVER,
        registry_dir=tmp_path / "plugins_registry",
        preparer=service,
        health=service,
        on_registration=lambda ok, error: said.append((ok, error)),
    )
    s.start()
    yield s, service, said
    s.stop()


def channel(path: pathlib.Path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix://{path}")


def test_regenerating_gives_the_checked_in_files_and_the_wire_names_are_upstreams() -> None:
    assert regen.drifted() == []
    names = {
        s.full_name
        for module in (v1, v1beta1, health_pb2, reg_pb2)
        for s in module.DESCRIPTOR.services_by_name.values()
    }
    assert names == {
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "v1alpha1.DRAResourceHealth",
        "pluginregistration.Registration",
    }


def test_get_info_and_the_registration_status(
    running: tuple[server.DraPluginServer, Service, list[tuple[bool, str]]],
) -> None:
    s, _, said = running
    assert s.serving()
    with channel(s.registration_socket) as ch:
        stub = reg_grpc.RegistrationStub(ch)
        info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=5)
        assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(s.dra_socket))
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        stub.NotifyRegistrationStatus(
            reg_pb2.RegistrationStatus(plugin_registered=False, error="bad version"), timeout=5
        )
        stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    assert said == [(False, "bad version"), (True, "")]
    assert s.registered == (True, "")


@pytest.mark.parametrize(("pb", "grpc_module"), [(v1, v1_grpc), (v1beta1, v1beta1_grpc)], ids=["v1", "v1beta1"])
def test_prepare_and_unprepare_map_every_field(
    running: tuple[server.DraPluginServer, Service, list[tuple[bool, str]]], pb: object, grpc_module: object
) -> None:
    s, service, _ = running
    claims = [pb.Claim(namespace="ns", uid=u, name=f"c-{u}") for u in ("u1", "u2", "u3")]  # type: ignore[attr-defined]
    with channel(s.dra_socket) as ch:
        stub = grpc_module.DRAPluginStub(ch)  # type: ignore[attr-defined]
        answer = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=claims), timeout=5)  # type: ignore[attr-defined]
        unanswer = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=claims), timeout=5)  # type: ignore[attr-defined]
    assert service.prepared == [[model.ClaimRef("ns", u, f"c-{u}") for u in ("u1", "u2", "u3")]]
    first, second = answer.claims["u1"].devices
    assert (first.pool_name, first.device_name, list(first.request_names), list(first.cdi_device_ids)) == (
        "node-a",
        "gpu-0000-09-00-0",
        ["gpus"],
        list(DEVICE.cdi_ids),
    )
    if pb is v1:
        assert not first.HasField("share_id") and second.share_id == "s-1"
    else:
        assert "share_id" not in v1beta1.Device.DESCRIPTOR.fields_by_name  # v1beta1 has no shares
    assert list(second.request_names) == ["a", "b"] and list(second.cdi_device_ids) == ["x=1", "x=2"]
    assert answer.claims["u2"].error == "not here" and not answer.claims["u2"].devices
    assert "no answer for claim u3" in answer.claims["u3"].error  # left out by the service: still answered
    assert {u: c.error for u, c in unanswer.claims.items()} == {"u1": "", "u2": "busy", "u3": ""}


def test_a_service_that_raises_gives_every_claim_an_error(
    running: tuple[server.DraPluginServer, Service, list[tuple[bool, str]]],
) -> None:
    s, service, _ = running
    service.raise_on_prepare = True
    with channel(s.dra_socket) as ch:
        answer = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="ns", uid="u1", name="c")]), timeout=5
        )
    assert "NodePrepareResources failed: disk on fire" in answer.claims["u1"].error


def test_the_health_stream_sends_all_at_once_then_each_change_and_ends_with_the_client(
    running: tuple[server.DraPluginServer, Service, list[tuple[bool, str]]],
) -> None:
    s, service, _ = running
    ch = channel(s.dra_socket)
    stream = health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(health_pb2.NodeWatchResourcesRequest())
    first = next(stream)
    (device,) = first.devices
    assert (device.device.pool_name, device.device.device_name, device.health) == (
        "node-a",
        "gpu-1",
        health_pb2.HEALTHY,
    )
    assert (device.last_updated_time, device.health_check_timeout_seconds) == (100, 30)
    sick = model.DeviceHealthReport("node-a", "gpu-1", model.HealthState.UNHEALTHY, "off the bus", 105.0)
    started = time.monotonic()
    service.change((sick,))
    second = next(stream)
    assert time.monotonic() - started < 1.0  # pushed on the change, not at the next poll
    assert (second.devices[0].health, second.devices[0].message) == (health_pb2.UNHEALTHY, "off the bus")
    assert s.streams == 1
    stream.cancel()
    ch.close()
    deadline = time.monotonic() + 5
    while s.streams:  # the server's loop notices within its 1 s wait and gives its thread back
        assert time.monotonic() < deadline, "the health stream outlived its client"
        time.sleep(0.05)


def test_stale_sockets_are_replaced_and_stop_removes_both(short_dir: pathlib.Path) -> None:
    tmp_path = short_dir
    service = Service()
    s = server.DraPluginServer(
        DRIVER, plugin_dir=tmp_path / "p", registry_dir=tmp_path / "r", preparer=service, health=service
    )
    # A killed process's sockets: bound once, never removed.
    import socket as sockets

    for path in (s.dra_socket, s.registration_socket):
        path.parent.mkdir(parents=True, exist_ok=True)
        stale = sockets.socket(sockets.AF_UNIX)
        stale.bind(str(path))
        stale.close()
    s.start()
    with channel(s.registration_socket) as ch:
        assert reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=5).name == DRIVER
    s.stop()
    assert not s.dra_socket.exists() and not s.registration_socket.exists() and not s.serving()
    s.start()  # again, in the same process
    with channel(s.dra_socket) as ch:
        v1_grpc.DRAPluginStub(ch).NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(), timeout=5)
    s.stop()
    (tmp_path / "r").mkdir(exist_ok=True)
    s.registration_socket.write_text("not a socket")
    with pytest.raises(server.ServeFailed):
        s.start()  # something that is not a socket is left alone: listening there fails loudly
    assert s.registration_socket.read_text() == "not a socket" and not s.dra_socket.exists()
