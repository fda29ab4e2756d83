"""The CDI spec and the device list in step, over real gRPC (issue 20, item 3; docs/device-plugin.md "Orderings"):

- no device ID is in a ListAndWatch response before its CDI entry is in the spec on disk: checked by the
  test kubelet as each response arrives, while GPUs come and go and PFs trade places with their VFs;
  meanwhile a reader that reads the spec in a loop never finds it missing or partly written;
- while the spec cannot be written, new devices are not advertised, and devices whose entry is no longer on
  disk are withdrawn (and refused by Allocate); once it can be written, they come back;
- a withdrawn device that a pod holds (PodResources) keeps its entry, and loses it once no pod holds it and
  the grace has passed;
- an Allocate answered for a device just before it was withdrawn keeps its entry for the grace, even when
  PodResources does not show the allocation yet;
- on stop the spec keeps only the entries pods hold, and a restarted agent keeps them while they are held;
- an inventory read that overlaps driver-manager's VF change (its signal withdrawn and written again) is
  thrown away, never offered.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence

import attrs
import grpc
import pytest

from metax_core.inventory import PciFunction
from metax_core.node import cdi
from metax_k8s.deviceplugin.v1beta1 import api_pb2
from services._agent import publish

from .conftest import Node
from .fakes import vf

GPU = "metax-tech.com/gpu"


def with_vfs(pf: PciFunction, count: int) -> list[PciFunction]:
    vfs = [vf(pf, n) for n in range(count)]
    return [attrs.evolve(pf, sriov_numvfs=count, vfs=tuple(v.address for v in vfs)), *vfs]


def on_disk(node: Node) -> set[str]:
    """CDI device names in the spec on disk now (none when there is no readable spec)."""
    try:
        return {d["name"] for d in json.loads(node.cdi_path.read_text())["devices"]}
    except (OSError, ValueError):
        return set()


class Checker:
    """Runs in the test kubelet's stream thread: every listed ID must resolve in the spec on disk *now*."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.lists = 0
        self.violations: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, resource: str, listed: dict[str, api_pb2.Device]) -> None:
        if resource != GPU:
            return
        missing = sorted(i for i in listed if cdi.device_name(i) not in on_disk(self.node))
        with self._lock:
            self.lists += 1
            if missing:
                self.violations.append(f"listed {missing} with no CDI entry on disk")


class Reader(threading.Thread):
    """Reads the spec in a loop, as a runtime's CDI cache does on every event: whole, or a failure."""

    def __init__(self, node: Node) -> None:
        super().__init__(name="cdi-reader", daemon=True)
        self.node = node
        self.reads = 0
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                json.loads(self.node.cdi_path.read_text())
            except (OSError, ValueError) as exc:
                self.failures.append(repr(exc))
            self.reads += 1


def test_no_id_is_listed_before_its_entry_is_on_disk(node: Node) -> None:
    checker = Checker(node)
    node.kubelet.on_list = checker
    pfs = list(node.inventory.present)
    node.start(cdi_grace=0.0)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 4)
    reader = Reader(node)
    reader.start()

    a, b = pfs[0], pfs[2]
    steps = [
        [*with_vfs(a, 2), *pfs[1:]],  # one PF has its VFs, the others not yet (driver-manager mid-round)
        [*with_vfs(a, 2), pfs[1], *with_vfs(b, 2), pfs[3]],
        pfs[:1],  # GPUs leave the bus
        pfs,  # and come back
        [*with_vfs(a, 3), *with_vfs(b, 1)],
        pfs,
    ]
    for _ in range(3):
        for functions in steps:
            node.inventory.set(functions)
            expected = {str(f.address) for f in functions if not f.vfs}
            node.kubelet.wait_for(lambda e=expected: node.kubelet.healthy(GPU) == e, what=f"{sorted(expected)}")
    reader.done.set()
    reader.join()
    assert checker.lists >= 3 * len(steps)
    assert checker.violations == []
    assert reader.reads > 100 and reader.failures == []


def test_devices_wait_for_a_spec_that_cannot_be_written(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    checker = Checker(node)
    node.kubelet.on_list = checker
    pfs = list(node.inventory.present)
    node.inventory.set(pfs[:2])
    node.start()
    first = {str(f.address) for f in pfs[:2]}
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == first)

    node.cdi_path.unlink()
    node.cdi_path.mkdir()  # something that is no spec sits where the spec belongs
    node.inventory.set(pfs)
    node.kubelet.wait_for(lambda: node.kubelet.devices[GPU] == {}, what="every GPU withdrawn")
    with pytest.raises(grpc.RpcError) as refused:
        node.kubelet.allocate(GPU, [str(pfs[0].address)])
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "not advertised" in str(refused.value.details())
    assert "cannot write the CDI spec" in caplog.text

    node.cdi_path.rmdir()
    everything = {str(f.address) for f in pfs}
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == everything, what="all four once the spec is written")
    assert on_disk(node) == {cdi.device_name(i) for i in everything}
    [response] = node.kubelet.allocate(GPU, sorted(everything)).container_responses
    assert len(response.cdi_devices) == 4
    assert checker.violations == []


def test_a_withdrawn_device_keeps_its_entry_while_a_pod_holds_it(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    pfs = list(node.inventory.present)
    node.start(cdi_grace=0.1)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 4)
    b = pfs[2]
    node.kubelet.allocate(GPU, [str(b.address)])
    node.held = {GPU: [str(b.address)]}

    node.inventory.set([*pfs[:2], *with_vfs(b, 2), pfs[3]])  # b's VFs replace it
    vfs = {cdi.device_name(str(vf(b, n).address)) for n in range(2)}
    node.kubelet.wait_for(lambda: str(b.address) not in node.kubelet.devices[GPU], what=f"{b.address} withdrawn")
    node.kubelet.wait_for(lambda: vfs <= on_disk(node), what="the VFs' entries")
    assert cdi.device_name(str(b.address)) in on_disk(node)
    node.kubelet.wait_for(lambda: "held by a pod" in caplog.text, what="the agent to say why it keeps it")

    node.held = {}
    node.kubelet.wait_for(
        lambda: cdi.device_name(str(b.address)) not in on_disk(node), what="the entry dropped once released"
    )
    assert vfs <= on_disk(node)


def test_an_allocation_not_yet_in_pod_resources_keeps_its_entry_for_the_grace(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pfs = list(node.inventory.present)
    node.start(cdi_grace=1.5)
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 4)
    last = pfs[3]
    node.kubelet.allocate(GPU, [str(last.address)])  # PodResources (node.held) does not show it
    node.inventory.set(pfs[:3])
    name = cdi.device_name(str(last.address))
    node.kubelet.wait_for(lambda: str(last.address) not in node.kubelet.devices[GPU], what="withdrawn")
    assert name in on_disk(node)
    assert "withdrawn recently" in caplog.text
    node.kubelet.wait_for(lambda: name not in on_disk(node), what="the entry dropped after the grace")


def test_stop_keeps_held_entries_and_a_restart_keeps_them_while_held(node: Node) -> None:
    pfs = list(node.inventory.present)
    node.start()
    node.kubelet.wait_for(lambda: len(node.kubelet.healthy(GPU)) == 4)
    held = str(pfs[1].address)
    node.held = {GPU: [held]}
    node.stop_agent()
    assert on_disk(node) == {cdi.device_name(held)}

    node.inventory.set([pfs[0]])  # the held GPU is gone when the agent comes back
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {str(pfs[0].address)})
    assert on_disk(node) == {cdi.device_name(str(pfs[0].address)), cdi.device_name(held)}
    node.held = {}
    node.kubelet.wait_for(lambda: on_disk(node) == {cdi.device_name(str(pfs[0].address))}, what="released")
    node.stop_agent()
    assert not node.cdi_path.exists()


def test_an_inventory_read_that_overlaps_a_vf_change_is_never_offered(node: Node) -> None:
    """driver-manager withdraws its signal while it changes VF counts; gpu-device throws away an inventory read
    whose signals before and after are not the same writes, even when the words are the same again (O1)."""
    driver = publish.Publisher("n", "driver", nodes=node.labels, events=None, board=node.board)
    driver.signal(True, "metax 2.18.0 loaded")
    pfs = list(node.inventory.present)
    final = [f for pf in pfs for f in with_vfs(pf, 2)]
    half = [*with_vfs(pfs[0], 2), *pfs[1:]]
    real_functions = node.inventory.functions
    armed = threading.Event()

    def functions() -> Sequence[PciFunction]:
        if not armed.is_set():
            return real_functions()
        armed.clear()
        # driver-manager's whole round runs while gpu-device reads: withdraw, write the counts, ready again
        driver.signal(False, "setting 2 VF(s) per GPU on 4 GPU(s)")
        node.inventory.set(final)
        driver.signal(True, "metax 2.18.0 loaded")
        return half  # what a read in the middle of the writes saw

    node.inventory.functions = functions  # type: ignore[method-assign]
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == {str(pf.address) for pf in pfs})
    armed.set()
    expected = {str(f.address) for f in final if not f.vfs}
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == expected, what="the VFs after the change")
    assert not armed.is_set(), "the overlapping read never happened"
    half_ids = {str(f.address) for f in half if not f.vfs}
    offered = [set(listed) for _, listed in node.kubelet.updates[GPU]]
    assert half_ids not in offered
    assert not any(str(pfs[1].address) in ids and str(final[1].address) in ids for ids in offered)
