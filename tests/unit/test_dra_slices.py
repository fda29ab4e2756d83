"""`metax_core.dra.slices` and `metax_core.dra.health` (R-DRA): the devices a node publishes and their slices.

- one device per usable function (VFs instead of their PF, vfio-bound ones typed ``vfio``; taints of GPUs
  that are not fine: tests/unit/test_dra_taints.py), attributes users select on (PCIe root from the topmost
  bridge, NUMA, semver driver version, MetaXLink group), memory as capacity;
- slices: at most 128 devices each, stable names, owner the Node, the pool's generation bumped only on
  change (an unchanged pool plans nothing: quiet), no devices -> every slice deleted; the reader
  (`published_in`) reads back what the writer planned;
- health: every device ever published is reported, gone from the bus -> unhealthy, degraded -> unhealthy with
  its severity and fault named.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from metax_core.dra import DRIVER, health, model, slices
from metax_core.health import faults, verdict
from metax_core.inventory import (
    METAX_VENDOR_ID,
    DriverVersion,
    FunctionKind,
    GpuLink,
    GpuMetrics,
    LinkKind,
    PciAddress,
    PciFunction,
)

NODE = slices.NodeRef("node-a", "uid-a")


def gpu(bus: int, *, driver: str = "metax", root: int = 0, numa: int | None = 0, **kw: object) -> PciFunction:
    fields: dict[str, object] = {"iommu_group": bus, "numa_node": numa, **kw}
    return PciFunction(
        address=PciAddress(f"0000:{bus:02x}:00.0"),
        vendor_id=METAX_VENDOR_ID,
        device_id=0x4000,
        driver=driver,
        pcie_path=(PciAddress(f"0000:{root:02x}:01.0"), PciAddress(f"0000:{bus - 1:02x}:00.0")),
        **fields,  # type: ignore[arg-type]
    )


def attr(device: slices.PublishedDevice, name: str) -> object:
    key = name if "/" in name else f"{DRIVER}/{name}"
    return next(iter(device.attributes[key].values())) if key in device.attributes else None


def test_each_usable_function_is_one_device_with_its_attributes() -> None:
    facts = slices.NodeFacts(
        "node-a",
        functions=(gpu(0x09, root=0x00), gpu(0x89, root=0x80, numa=1)),
        metrics=(GpuMetrics(PciAddress("0000:09:00.0"), 0, "MetaX C500", memory_total_bytes=64 << 30),),
        links=(GpuLink(PciAddress("0000:09:00.0"), PciAddress("0000:89:00.0"), LinkKind.MX),),
        driver_version=DriverVersion("2.14.6"),
    )
    first, second = slices.published_devices(facts)
    assert (first.name, second.name) == ("gpu-0000-09-00-0", "gpu-0000-89-00-0")
    assert attr(first, "type") == slices.TYPE_GPU
    assert attr(first, slices.PCIE_ROOT_ATTRIBUTE) == "pci0000:00"
    assert attr(second, slices.PCIE_ROOT_ATTRIBUTE) == "pci0000:80"
    assert attr(first, slices.PCI_BUS_ID_ATTRIBUTE) == "0000:09:00.0"
    assert (attr(first, "numaNode"), attr(second, "numaNode")) == (0, 1)
    assert first.attributes[f"{DRIVER}/driverVersion"] == {"version": "2.14.6"}
    assert attr(first, "metaxlinkGroup") == attr(second, "metaxlinkGroup") == 1
    assert attr(first, "product") == "C500"
    assert first.capacity == {"memory": {"value": str(64 << 30)}}
    assert second.capacity == {}  # no size reported: no capacity rather than a guess
    assert attr(first, "uuid") != attr(second, "uuid")


def test_vfs_replace_their_pf_and_vfio_functions_are_typed_vfio() -> None:
    pf = gpu(0x09, sriov_numvfs=2, sriov_totalvfs=4)
    vfs = tuple(
        PciFunction(
            address=PciAddress(f"0000:09:00.{i}"),
            vendor_id=METAX_VENDOR_ID,
            device_id=0x4000,
            kind=FunctionKind.VF,
            physfn=pf.address,
            driver="metax",
            iommu_group=100 + i,
            pcie_path=pf.pcie_path,
        )
        for i in (1, 2)
    )
    vfio = gpu(0x0A, driver="vfio-pci")
    published = slices.published_devices(slices.NodeFacts("n", (pf, *vfs, vfio), iommu_enabled=True))
    assert [(d.address, attr(d, "type")) for d in published] == [
        ("0000:09:00.1", "vf"),
        ("0000:09:00.2", "vf"),
        ("0000:0a:00.0", "vfio"),
    ]
    assert all(f"{DRIVER}/driverVersion" not in d.attributes for d in published if attr(d, "type") == "vfio")


def test_odd_driver_versions_are_left_out() -> None:
    facts = slices.NodeFacts("n", (gpu(0x09),), driver_version=DriverVersion("2.14"))
    (only,) = slices.published_devices(facts)
    assert f"{DRIVER}/driverVersion" not in only.attributes
    assert slices.semver(DriverVersion("2.14.6.1")) == "2.14.6"


def _devices(n: int) -> list[slices.PublishedDevice]:
    functions = tuple(
        PciFunction(
            address=PciAddress(f"0000:{i // 32:02x}:{i % 32:02x}.0"),
            vendor_id=METAX_VENDOR_ID,
            device_id=0x4000,
            driver="metax",
        )
        for i in range(n)
    )
    return list(slices.published_devices(slices.NodeFacts("node-a", functions)))


def _published(plan: slices.SlicePlan) -> list[dict[str, object]]:
    return [dict(body) for body in plan.apply]


def test_slices_hold_at_most_128_devices_and_an_unchanged_pool_plans_nothing() -> None:
    wanted = _devices(300)
    first = slices.plan_slices(NODE, wanted, [])
    assert [len(b["spec"]["devices"]) for b in first.apply] == [128, 128, 44]
    assert {b["spec"]["pool"]["resourceSliceCount"] for b in first.apply} == {3}
    assert {b["spec"]["pool"]["generation"] for b in first.apply} == {1}
    assert first.apply[0]["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-a",
        "uid": "uid-a",
    }
    again = slices.plan_slices(NODE, wanted, _published(first))
    assert again.quiet and again.generation == 1
    assert len(slices.published_in(_published(first), "node-a")) == 300


def test_a_change_bumps_the_generation_of_every_slice_and_drops_the_extra_ones() -> None:
    first = slices.plan_slices(NODE, _devices(200), [])
    fewer = slices.plan_slices(NODE, _devices(100), _published(first))
    assert {b["spec"]["pool"]["generation"] for b in fewer.apply} == {2}
    assert [b["metadata"]["name"] for b in fewer.apply] == [slices.slice_name("node-a", 0)]
    assert fewer.delete == (slices.slice_name("node-a", 1),)
    gone = slices.plan_slices(NODE, [], _published(first))
    assert gone.apply == () and set(gone.delete) == {slices.slice_name("node-a", i) for i in (0, 1)}


def test_other_drivers_and_nodes_slices_are_left_alone() -> None:
    foreign = {
        "metadata": {"name": "x"},
        "spec": {"driver": "other.example.com", "nodeName": "node-a", "pool": {"generation": 9}, "devices": []},
    }
    other_node = slices.plan_slices(slices.NodeRef("node-b", "b"), _devices(2), [])
    plan = slices.plan_slices(NODE, _devices(2), [foreign, *_published(other_node)])
    assert plan.generation == 1 and plan.delete == ()


def test_slices_of_mixed_generations_are_rewritten() -> None:
    """A driver killed halfway through writing a bumped pool left slices of two generations: rewrite all."""
    first = _published(slices.plan_slices(NODE, _devices(200), []))
    first[1]["spec"]["pool"]["generation"] = 7  # type: ignore[index]
    plan = slices.plan_slices(NODE, _devices(200), first)
    assert plan.generation == 8 and len(plan.apply) == 2


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_the_reader_sees_exactly_the_wanted_devices_after_any_change(before: int, after: int) -> None:
    published = _published(slices.plan_slices(NODE, _devices(before), []))
    plan = slices.plan_slices(NODE, _devices(after), published)
    names = {b["metadata"]["name"] for b in plan.apply}
    now = [b for b in published if b["metadata"]["name"] not in names and b["metadata"]["name"] not in plan.delete]  # type: ignore[index]
    now += _published(plan)
    assert sorted(slices.published_in(now, "node-a")) == sorted(d.name for d in _devices(after))
    assert all(len(b["spec"]["devices"]) <= slices.MAX_DEVICES_PER_SLICE for b in now)  # type: ignore[index]


def test_health_reports_every_known_device_and_a_gone_one_is_unhealthy() -> None:
    a, b, c, d = (PciAddress(f"0000:0{i}:00.0") for i in (1, 2, 3, 4))
    known = {"gpu-1": a, "gpu-2": b, "gpu-3": c, "gpu-4": d}
    sick = {
        b: verdict.Verdict((faults.Fault(faults.FaultKind.STATE, "mx-smi reports GPU-State Error"),)),
        d: verdict.Verdict((faults.Fault(faults.FaultKind.THERMAL, "hotspot 99 °C, limit 95 °C"),)),
    }
    got = health.reports("node-a", known, present={a, b, d}, verdicts=sick, now=5.0)
    assert [(r.device, r.state, r.message) for r in got] == [
        ("gpu-1", model.HealthState.HEALTHY, ""),
        ("gpu-2", model.HealthState.UNHEALTHY, "unusable: StateFault: mx-smi reports GPU-State Error"),
        ("gpu-3", model.HealthState.UNHEALTHY, health.GONE),
        ("gpu-4", model.HealthState.UNHEALTHY, "degraded: Thermal: hotspot 99 °C, limit 95 °C"),
    ]
    later = health.reports("node-a", known, present={a, b, d}, verdicts=sick, now=9.0)
    assert not health.changed(got, later)
    assert health.changed(got, health.reports("node-a", known, present={a, b, c, d}, verdicts={}, now=9.0))
