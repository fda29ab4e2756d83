"""`metax_core.node.cdi_sync`: which CDI entries the spec keeps and which devices may be advertised.

- advertised devices always have an entry, with their current device nodes;
- a withdrawn device's entry stays while a pod holds it, while the holders are unknown, and for the grace
  after it was last advertised or allocated; it goes after that (and only then);
- a spec found on disk at start seeds kept entries; malformed parts are ignored;
- PodResources IDs map to CDI names (an sGPU share names its GPU; vfio-gpu and other plugins' resources none);
- only devices whose entry is on disk are offered; vfio-gpu needs none;
- Allocate refuses a device whose CDI entry is not on disk, naming it.
"""

from __future__ import annotations

import pytest

from metax_core.inventory import FunctionKind, PciAddress, PciFunction
from metax_core.node import cdi, cdi_sync, devices

R = devices.Resource
A = cdi.CdiDevice("0000-09-00.0", ("/dev/dri/card0",))
B = cdi.CdiDevice("0000-83-00.0", ("/dev/dri/card1",))
B_VF = cdi.CdiDevice("0000-83-00.1", ("/dev/dri/card2",))


def entries(*devs: cdi.CdiDevice, at: float = 0.0) -> dict[str, cdi_sync.Entry]:
    return {d.name: cdi_sync.Entry(d, at) for d in devs}


def test_advertised_devices_get_entries_with_their_current_nodes() -> None:
    moved = cdi.CdiDevice(A.name, ("/dev/dri/card5",))
    d = cdi_sync.decide_entries([moved, B], entries(A), held=frozenset(), now=10.0, grace=5.0)
    assert d.devices() == (moved, B)
    assert d.entries[A.name].last_offered == 10.0
    assert d.kept == {} and d.dropped == ()


def test_withdrawn_entry_stays_while_a_pod_holds_it_and_goes_after() -> None:
    previous = entries(A, B, at=0.0)
    held = cdi_sync.decide_entries([A, B_VF], previous, held={B.name}, now=100.0, grace=5.0)
    assert held.devices() == (A, B, B_VF)
    assert held.kept == {B.name: cdi_sync.Kept.HELD}
    released = cdi_sync.decide_entries([A, B_VF], held.entries, held=frozenset(), now=101.0, grace=5.0)
    assert released.devices() == (A, B_VF)
    assert released.dropped == (B.name,)


def test_withdrawn_entry_stays_while_the_holders_are_unknown() -> None:
    d = cdi_sync.decide_entries([A], entries(A, B), held=None, now=1e6, grace=5.0)
    assert d.devices() == (A, B)
    assert d.kept == {B.name: cdi_sync.Kept.HOLDERS_UNKNOWN}


@pytest.mark.parametrize(("now", "kept"), [(14.9, True), (15.0, False), (30.0, False)])
def test_grace_counts_from_the_last_advertisement(now: float, kept: bool) -> None:
    d = cdi_sync.decide_entries([A], entries(A, B, at=10.0), held=frozenset(), now=now, grace=5.0)
    assert (B.name in d.entries) is kept
    assert (d.kept == {B.name: cdi_sync.Kept.GRACE}) is kept
    assert (d.dropped == (B.name,)) is not kept


def test_grace_counts_from_the_last_allocation_too() -> None:
    # Allocate answered at 20 while the device was withdrawn at 10: PodResources may not show it yet.
    d = cdi_sync.decide_entries(
        [A], entries(B, at=10.0), held=frozenset(), now=22.0, grace=5.0, allocated={B.name: 20.0}
    )
    assert d.kept == {B.name: cdi_sync.Kept.GRACE}
    assert d.entries[B.name].last_offered == 20.0
    later = cdi_sync.decide_entries([A], d.entries, held=frozenset(), now=25.0, grace=5.0)
    assert later.dropped == (B.name,)


def test_a_device_that_comes_back_is_advertised_again_not_kept() -> None:
    d = cdi_sync.decide_entries([A, B], entries(A, B, at=0.0), held=frozenset(), now=50.0, grace=5.0)
    assert d.kept == {} and d.devices() == (A, B)


def test_seed_reads_a_previous_spec_and_ignores_what_it_cannot_read() -> None:
    spec = cdi.build_spec([A, B])
    assert cdi_sync.seed(spec, 3.0) == entries(A, B, at=3.0)
    assert cdi_sync.names_in(spec) == {A.name, B.name}
    assert cdi_sync.seed(None, 3.0) == {} and cdi_sync.names_in(None) == frozenset()
    odd = {
        "devices": [{"name": 7}, "x", {"name": "ok", "containerEdits": {"deviceNodes": [{"path": 1}, {"path": "/d"}]}}]
    }
    assert cdi_sync.seed(odd, 0.0) == entries(cdi.CdiDevice("ok", ("/d",)))
    assert cdi_sync.seed({"devices": "none"}, 0.0) == {}
    bad = {"devices": [{"name": "x y"}, {"name": "z", "containerEdits": {"deviceNodes": [{"path": "dev/a"}]}}]}
    seeded = cdi_sync.seed(bad, 0.0)
    assert seeded == entries(cdi.CdiDevice("z"))
    assert cdi.build_spec(tuple(e.device for e in seeded.values())) is not None  # still a valid spec


def test_held_names_map_device_ids_to_cdi_names() -> None:
    held = {
        R.GPU.value: ["0000:09:00.0"],
        R.SGPU.value: ["0000:83:00.0-03", "0000:83:00.0-15"],
        R.VFIO_GPU.value: ["0000:8a:00.0"],
        "example.com/nic": ["eth0"],
    }
    assert cdi_sync.held_names(held) == {"0000-09-00.0", "0000-83-00.0"}


def test_cdi_name_of_each_resource() -> None:
    assert devices.cdi_name(R.GPU, "0000:83:00.1") == "0000-83-00.1"
    assert devices.cdi_name(R.SGPU, devices.share_id(PciAddress("0000:83:00.0"), 7)) == "0000-83-00.0"
    assert devices.cdi_name(R.VFIO_GPU, "0000:83:00.0") is None


def fn(address: str, driver: str = "metax") -> PciFunction:
    return PciFunction(PciAddress(address), 0x9999, 0x4000, FunctionKind.PF, driver=driver, iommu_group=3)


def plan_of(*functions: PciFunction) -> devices.Plan:
    return devices.plan_devices(functions, settings=devices.NodeSettings(), shares=2, health={}, iommu_enabled=True)


def test_only_devices_with_an_entry_on_disk_are_offered() -> None:
    plan = plan_of(fn("0000:09:00.0"), fn("0000:83:00.0"), fn("0000:8a:00.0", "vfio-pci"))
    offer = cdi_sync.advertisable(plan, {A.name})
    assert [d.id for d in offer.plan.devices[R.GPU]] == ["0000:09:00.0"]
    assert [d.id for d in offer.plan.devices[R.VFIO_GPU]] == ["0000:8a:00.0"]  # needs no CDI entry
    assert offer.withheld == ("0000:83:00.0",)
    assert cdi_sync.advertisable(plan, set()).plan.devices[R.GPU] == ()
    sgpu = devices.plan_devices(
        [fn("0000:09:00.0")],
        settings=devices.NodeSettings(mode=devices.Mode.SGPU),
        shares=2,
        health={},
        iommu_enabled=True,
    )
    assert cdi_sync.advertisable(sgpu, {A.name}).withheld == ()
    assert cdi_sync.advertisable(sgpu, set()).withheld == ("0000:09:00.0-00", "0000:09:00.0-01")


def test_allocate_refuses_a_device_whose_entry_is_not_on_disk() -> None:
    plan = plan_of(fn("0000:09:00.0"), fn("0000:83:00.0"))

    def allocate(ids: list[str], resolvable: set[str] | None) -> devices.ContainerAllocation:
        return devices.plan_allocation(
            R.GPU, ids, plan=plan, device_nodes={}, qos=devices.QosPolicy.BEST_EFFORT, shares=2, resolvable=resolvable
        )

    assert allocate(["0000:09:00.0"], {A.name}).cdi_devices == ("metax-tech.com/gpu=0000-09-00.0",)
    with pytest.raises(devices.AllocationRefused, match=r"0000:83:00.0: no entry in the CDI spec on disk") as err:
        allocate(["0000:09:00.0", "0000:83:00.0"], {A.name})
    assert err.value.ids == ("0000:83:00.0",)
    assert allocate(["0000:83:00.0"], None).cdi_devices == ("metax-tech.com/gpu=0000-83-00.0",)  # not checked
    no_cdi = devices.plan_allocation(
        R.GPU,
        ["0000:83:00.0"],
        plan=plan,
        device_nodes={},
        qos=devices.QosPolicy.BEST_EFFORT,
        shares=2,
        with_cdi=False,
        resolvable=set(),
    )
    assert no_cdi.cdi_devices == ()
