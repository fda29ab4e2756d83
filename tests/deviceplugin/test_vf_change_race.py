"""gpu-device never offers an inventory read while driver-manager was changing VF counts (R-READY, R-VF).

driver-manager withdraws the driver's readiness signal, writes each PF's VF count one PF at a time, then
publishes the signal again. An inventory read that falls wholly inside that window is consistent by its own
before/after check (the signal did not change during the read) but holds a half-changed set: one PF already
split into VFs, the next still whole. When the signal comes back, the readiness check may come due before the
next inventory read. Deciding "may advertise" on the returning signal alone then offered the half set, and the
kubelet admitted a Pending pod onto a PF about to be split (tests/realnode/test_agents.py's VF edit, once in a
CI rehearsal). The ticks here run on a fake clock, in exactly that order; the kubelet is the test kubelet on
real unix sockets and records every list it receives.
"""

from __future__ import annotations

from metax_core import components
from metax_core.inventory import PciFunction
from services.gpu_device import bootstrap

from .conftest import Clock, Node, four_gpus
from .fakes import vf

GPU = "metax-tech.com/gpu"
DRIVER = components.signal(components.Component.DRIVER)
INVENTORY_EVERY = 100.0
READINESS_EVERY = 1.0


def split(pfs: list[PciFunction], count: int) -> list[PciFunction]:
    """``pfs`` with the first ``count`` of them given two VFs each (what the kernel shows mid-change)."""
    out: list[PciFunction] = []
    for index, pf in enumerate(pfs):
        out.append(pf)
        if index < count:
            out += [vf(pf, 0), vf(pf, 1)]
    return out


def healthy(update: dict[str, str]) -> set[str]:
    return {device for device, health in update.items() if health == "Healthy"}


def test_a_half_changed_inventory_is_never_offered_when_the_driver_comes_back(node: Node) -> None:
    pfs = four_gpus()
    whole = {str(pf.address) for pf in pfs}
    half = {str(vf(pfs[0], n).address) for n in range(2)} | whole - {str(pfs[0].address)}
    every_vf = {str(vf(pf, n).address) for pf in pfs for n in range(2)}
    clock = Clock()
    agent = bootstrap.bootstrap(
        node.settings(inventory_interval=INVENTORY_EVERY, readiness_interval=READINESS_EVERY, healthy_interval=0),
        inventory=node.inventory,
        monitor=node.monitor,
        nodes=node.labels,
        board=node.board,
        clock=clock,
    )
    try:
        agent.tick()
        node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == whole, what="the four whole PFs offered")

        node.set_ready(DRIVER, False, "changing VF counts")  # driver-manager, before it writes any count
        clock.now += READINESS_EVERY
        agent.tick()
        assert not agent.decision.may_advertise

        node.inventory.set(split(pfs, 1))  # one PF split, the others not yet
        clock.now += INVENTORY_EVERY  # the inventory is read wholly under the withdrawn signal: kept
        agent.tick()
        assert not agent.decision.may_advertise

        node.inventory.set(split(pfs, 4))  # every PF split, and the signal back
        node.set_ready(DRIVER)
        clock.now += READINESS_EVERY  # readiness comes due before the next inventory read
        agent.tick()
        assert agent.decision.may_advertise

        clock.now += INVENTORY_EVERY
        agent.tick()
        node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == every_vf, what="every PF's VFs offered")
        lists = [healthy(update) for _, update in node.kubelet.updates[GPU]]
        assert half not in lists, f"the kubelet was offered the half-changed inventory: {lists}"
        mixed = [offered for offered in lists if offered & every_vf and offered & whole]
        assert not mixed, f"the kubelet was offered VFs beside a PF being split: {mixed}"
    finally:
        agent.shutdown()
