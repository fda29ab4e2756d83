"""dra-driver on a fake host and the in-memory cluster (R-DRA, R-READY): the agent's own decisions, its
answers to the kubelet (through the `ClaimPreparer` port the gRPC server calls) and its host files.

Covers: the node's GPUs published as one pool of ResourceSlices owned by the Node, a steady round writes
nothing; nothing published while a required component is not ready; a GPU a device-plugin pod holds is not
published (the switch is safe); prepare reads the claim, writes its CDI spec before the checkpoint and
answers a repeat from the checkpoint, also after a restart; an unknown or bad claim gets an error naming it;
unprepare removes spec and entry and answers for claims it never knew; a GPU removed from the bus leaves the
slices and turns unhealthy in the health feed; a GPU fault taints its device within ``fail_after`` readings
(still published, NoSchedule, the node's report naming the pods that hold it) and clearing it removes the taint,
no restart; where the API server drops taints the device is withdrawn instead, said once; an uninstall request
withdraws the slices.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import attrs
import pytest

from metax_core.dra import DRIVER, claims, model, prepare, slices
from metax_core.health import report
from metax_core.node import readiness
from metax_core.ports.cluster import Objects, RawObject
from metax_hw_fake import builder
from services.dra_driver import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, Node, make_node


class RecordingServer:
    """Stands in for the gRPC server: the agent only starts and stops it (tests/dra covers the server)."""

    def __init__(self) -> None:
        self.running = False

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False


def settings(n: Node, **extra: object) -> config.Settings:
    fields: dict[str, Any] = {"required_components": (), **extra}
    return config.Settings(node_name=NODE, host_root=n.root, namespace=NAMESPACE, **fields)


def driver(
    n: Node, held: dict[str, list[str]] | None = None, objects: Objects | None = None, **extra: object
) -> tuple[agent.DraDriver, RecordingServer]:
    server = RecordingServer()
    hw = agent.Hardware.of(n.fake.hw, held=lambda: held or {})
    ports = n.ports("dra-driver")
    if objects is not None:
        ports = attrs.evolve(ports, objects=objects)
    built = bootstrap.bootstrap(
        settings(n, **extra), hw=hw, ports=ports, server_factory=lambda _: server, clock=n.clock
    )
    return built, server


def published(n: Node) -> list[dict[str, Any]]:
    return list(n.k8s.objects.list(slices.API_VERSION, slices.KIND).items)


def device_names(n: Node) -> list[str]:
    return sorted(slices.published_in(published(n), NODE))


def four_gpus() -> builder.FakeHostBuilder:
    return builder.FakeHostBuilder().gpus(4, metaxlink_group=2).host_driver("2.20.0")


def make_claim(n: Node, name: str, devices: list[str], params: dict[str, Any] | None = None) -> model.ClaimRef:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}},
    }
    created = n.k8s.objects.apply(body, field_manager="t")
    allocation: dict[str, Any] = {
        "results": [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    }
    if params is not None:
        allocation["config"] = [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}]
    status = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "status": {"allocation": {"devices": allocation}},
    }
    n.k8s.objects.apply_status(status, field_manager="t")
    return model.ClaimRef("default", created["metadata"]["uid"], name)


def test_the_nodes_gpus_are_one_pool_and_a_steady_round_writes_nothing(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, server = driver(n)
    d.tick()
    assert server.running
    (only,) = published(n)
    assert only["spec"]["nodeName"] == NODE and only["spec"]["pool"] == {
        "name": NODE,
        "generation": 1,
        "resourceSliceCount": 1,
    }
    assert only["metadata"]["ownerReferences"][0]["uid"] == n.node()["metadata"]["uid"]
    assert device_names(n) == sorted(slices.device_name(a) for a in n.fake.gpu_addresses())
    version = only["metadata"]["resourceVersion"]
    n.clock.advance(6)
    d.tick()
    assert published(n)[0]["metadata"]["resourceVersion"] == version  # quiet: nothing written


def test_nothing_is_published_until_the_required_components_are_ready(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n, required_components=("driver-manager",))
    d.tick()
    assert published(n) == []
    n.board.publish(readiness.ComponentReadiness("driver-manager", True, "loaded"))
    n.clock.advance(6)
    d.tick()
    assert len(device_names(n)) == 4


def test_a_gpu_a_device_plugin_pod_holds_is_not_published(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    first = n.fake.gpu_addresses()[0]
    d, _ = driver(n, held={"metax-tech.com/gpu": [first]})
    d.tick()
    assert slices.device_name(first) not in device_names(n) and len(device_names(n)) == 3


def test_prepare_writes_the_spec_then_the_checkpoint_and_answers_repeats_from_it(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n)
    d.tick()
    names = device_names(n)[:2]
    ref = make_claim(n, "train", names)
    outcome = d.prepare([ref])[ref.uid]
    assert outcome.error == "" and [x.device for x in outcome.devices] == names
    spec_path = n.root / "var/run/cdi" / prepare.spec_file_name(ref.uid)
    spec = json.loads(spec_path.read_text())
    assert {f"{spec['kind']}={dev['name']}" for dev in spec["devices"]} == {
        i for x in outcome.devices for i in x.cdi_ids
    }
    for dev in spec["devices"]:  # the fake host's real device node paths
        assert all(p.startswith("/dev/") for p in (e["path"] for e in dev["containerEdits"]["deviceNodes"]))
    checkpoint = prepare.parse_checkpoint(d.settings.checkpoint.read_text())
    assert set(checkpoint.claims) == {ref.uid}
    # The claim's allocation changes behind the driver's back: a repeat still answers what was prepared.
    n.k8s.objects.delete("resource.k8s.io/v1", "ResourceClaim", "train", "default")
    assert d.prepare([ref])[ref.uid] == outcome
    # A restarted driver reads the checkpoint and answers the same.
    again, _ = driver(n)
    again.tick()
    assert again.prepare([ref])[ref.uid] == outcome


def test_unknown_and_badly_configured_claims_get_an_error_naming_them(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n)
    d.tick()
    ghost = model.ClaimRef("default", "0000-ghost", "ghost")
    bad = make_claim(
        n, "bad", device_names(n)[:1], params={"apiVersion": claims.CONFIG_API_VERSION, "kind": "GpuConfig", "gpus": 2}
    )
    sdk = make_claim(
        n,
        "sdk",
        device_names(n)[1:2],
        params={"apiVersion": claims.CONFIG_API_VERSION, "kind": "GpuConfig", "macaVersion": "maca-9"},
    )
    got = d.prepare([ghost, bad, sdk])
    assert got[ghost.uid].error == "ResourceClaim default/ghost not found"
    assert "ResourceClaim default/bad" in got[bad.uid].error and "parameters.gpus" in got[bad.uid].error
    assert "maca-9" in got[sdk.uid].error and "no installed MXMACA version" in got[sdk.uid].error
    assert not any((n.root / "var/run/cdi").glob("metax-tech.com-claim_*"))
    assert not d.settings.checkpoint.exists() or not prepare.parse_checkpoint(d.settings.checkpoint.read_text()).claims


def test_unprepare_removes_spec_and_entry_and_answers_for_unknown_claims(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n)
    d.tick()
    ref = make_claim(n, "train", device_names(n)[:1])
    assert d.prepare([ref])[ref.uid].error == ""
    stranger = model.ClaimRef("default", "never-seen", "x")
    assert d.unprepare([ref, stranger]) == {ref.uid: "", stranger.uid: ""}
    assert not (n.root / "var/run/cdi" / prepare.spec_file_name(ref.uid)).exists()
    assert prepare.parse_checkpoint(d.settings.checkpoint.read_text()).claims == {}
    assert d.unprepare([ref]) == {ref.uid: ""}  # idempotent


def test_a_gpu_off_the_bus_leaves_the_slices_and_turns_unhealthy(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n)
    d.tick()
    reports, version = d.current()
    assert {r.state for r in reports} == {model.HealthState.HEALTHY} and len(reports) == 4
    gone = n.fake.gpu_addresses()[0]
    n.fake.fall_off_bus(gone, removed=True)
    n.clock.advance(6)
    d.tick()
    assert slices.device_name(gone) not in device_names(n)
    assert published(n)[0]["spec"]["pool"]["generation"] == 2
    assert d.wait_changed(version, timeout=0.1)
    reports, _ = d.current()
    assert {r.device: r.state for r in reports}[slices.device_name(gone)] is model.HealthState.UNHEALTHY


def device(n: Node, address: str) -> dict[str, Any]:
    return dict(slices.published_in(published(n), NODE)[slices.device_name(address)])


def reserve(n: Node, ref: model.ClaimRef, *pods: str) -> None:
    """What the scheduler writes: the pods the claim is reserved for."""
    claim = n.k8s.objects.get("resource.k8s.io/v1", "ResourceClaim", ref.name, ref.namespace)
    assert claim is not None
    reserved = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]
    status = {**claim["status"], "reservedFor": reserved}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": claim["metadata"]}
    n.k8s.objects.apply_status({**body, "status": status}, field_manager="t")


def test_a_gpu_fault_taints_its_device_and_clearing_it_removes_the_taint_without_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    n = make_node(tmp_path, four_gpus())
    d, server = driver(n)
    d.tick()
    bad = n.fake.gpu_addresses()[1]
    ref = make_claim(n, "train", [slices.device_name(bad)])
    assert d.prepare([ref])[ref.uid].error == ""
    reserve(n, ref, "trainer-0")
    n.fake.set_gpu(bad, state="Error")
    n.clock.advance(6)
    d.tick()  # seen once: not in force yet, a recheck is asked
    assert "taints" not in device(n, bad)
    n.clock.advance(d.health.rules.recheck)
    d.tick()  # fail_after (2) readings in a row: in force
    assert device(n, bad)["taints"] == [
        {"key": "metax-tech.com/gpu-health", "value": "StateFault", "effect": "NoSchedule"}
    ]
    assert len(device_names(n)) == 4  # still published: tainted, not withdrawn
    assert all("taints" not in device(n, a) for a in n.fake.gpu_addresses() if a != bad)
    reports, _ = d.current()
    (sick,) = [r for r in reports if r.device == slices.device_name(bad)]
    assert sick.state is model.HealthState.UNHEALTHY and sick.message.startswith("unusable: StateFault")
    (entry,) = report.decode(n.annotations()[report.ANNOTATION]).gpus
    assert entry.address == bad and entry.holders == ("default/trainer-0",)
    assert d.prepare([ref])[ref.uid].error == ""  # a claim on it already prepared is still answered

    n.fake.set_gpu(bad, state="Available")
    n.clock.advance(6)
    d.tick()
    assert "taints" in device(n, bad)  # clear_after (2) readings without it
    n.clock.advance(6)
    d.tick()
    assert "taints" not in device(n, bad)
    assert server.running and d.server is server  # the same driver, never restarted
    assert report.decode(n.annotations()[report.ANNOTATION]).gpus == ()
    version = published(n)[0]["metadata"]["resourceVersion"]
    n.clock.advance(6)
    d.tick()
    assert published(n)[0]["metadata"]["resourceVersion"] == version  # quiet again


class DroppingTaints:
    """The in-memory API server as a server with DRADeviceTaints off: it drops the taints it is sent."""

    def __init__(self, inner: Objects) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, obj: RawObject, **kw: Any) -> RawObject:
        if obj.get("kind") == slices.KIND:
            spec = obj["spec"]
            devices = [{k: v for k, v in x.items() if k != "taints"} for x in spec["devices"]]
            obj = {**obj, "spec": {**spec, "devices": devices}}
        return self.inner.apply(obj, **kw)


def test_where_the_server_drops_taints_a_faulty_gpu_is_withdrawn_and_it_is_said_once(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n, objects=DroppingTaints(n.ports("dra-driver").objects))
    d.tick()
    bad = n.fake.gpu_addresses()[2]
    n.fake.set_gpu(bad, state="Error")
    for step in (6, d.health.rules.recheck, 6, 6):
        n.clock.advance(step)
        d.tick()
    assert slices.device_name(bad) not in device_names(n) and len(device_names(n)) == 3
    assert not any("taints" in device(n, a) for a in n.fake.gpu_addresses() if a != bad)
    assert sum("drops device taints" in r.getMessage() for r in caplog.records) == 1
    n.fake.set_gpu(bad, state="Available")
    for _ in range(2):
        n.clock.advance(6)
        d.tick()
    assert len(device_names(n)) == 4


def test_an_unreadable_checkpoint_stops_serving_instead_of_forgetting_claims(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, four_gpus())
    d, server = driver(n)
    d.settings.checkpoint.parent.mkdir(parents=True)
    d.settings.checkpoint.write_text('{"version": 1, "claims": {}, "checksum": "x"}')
    with pytest.raises(Exception, match="checksum"):
        d.tick()
    assert not server.running


def test_an_uninstall_request_withdraws_the_slices(tmp_path: pathlib.Path) -> None:
    from metax_core.node import uninstall

    n = make_node(tmp_path, four_gpus())
    d, _ = driver(n)
    d.tick()
    assert published(n)
    n.k8s.node_metadata.patch_node_metadata(NODE, annotations={uninstall.REQUEST_ANNOTATION: "u-1"})
    n.clock.advance(6)
    d.tick()
    assert published(n) == []


def test_a_stopped_driver_withdraws_its_readiness_signal_and_keeps_its_slices(tmp_path: pathlib.Path) -> None:
    """Its pod may be leaving for good (the node switched to the device plugin): no stale "ready" stays on the
    host, where no uninstall of the driver would remove it (found by tests/e2e)."""
    n = make_node(tmp_path, four_gpus())
    d, server = driver(n)
    d.tick()
    assert n.board.read_all()["dra-driver"].ready
    d.shutdown()
    assert "dra-driver" not in n.board.read_all() and not server.running
    assert len(device_names(n)) == 4
