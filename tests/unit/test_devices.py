"""`metax_core.node.devices`: what gpu-device advertises and hands out, decided from facts alone.

- labels → mode and QoS policy, unknown values fall back with a reason;
- health: unreported is healthy, VFs inherit their PF's sickness, a failing monitor keeps the last view
  until the threshold and then marks everything unhealthy;
- advertising: one device per metax-bound function, VFs instead of their PF, N shares per GPU in sgpu
  mode, vfio-bound functions (with IOMMU and group) as vfio-gpu, everything unhealthy when not ready;
- preferred allocation: topology choices (switch, NUMA, distinct GPUs) and hypothesis properties (only
  available devices, requested size when possible, must-include kept, deterministic in input order);
- allocation: env, device nodes, CDI names, KubeVirt variables; unknown and unhealthy devices refused; the
  answer depends on the IDs only through `allocation_key` (their order does not matter).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.health import verdict
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import (
    METAX_VENDOR_ID,
    FunctionKind,
    PciAddress,
    PciFunction,
)
from metax_core.node import devices, preferred_allocation

R = devices.Resource


def fn(
    bus: int, *, driver: str | None = "metax", numa: int | None = 0, path: tuple[int, ...] = (), **kw: object
) -> PciFunction:
    fields: dict[str, object] = {"iommu_group": bus, **kw}
    return PciFunction(
        address=PciAddress(f"0000:{bus:02x}:00.0"),
        vendor_id=METAX_VENDOR_ID,
        device_id=0x4000,
        driver=driver,
        numa_node=numa,
        pcie_path=tuple(PciAddress(f"0000:{b:02x}:00.0") for b in path),
        **fields,  # type: ignore[arg-type]
    )


def vf_of(pf: PciFunction, n: int, driver: str = "metax") -> PciFunction:
    return PciFunction(
        address=PciAddress(pf.address[:-1] + str(n)),
        vendor_id=METAX_VENDOR_ID,
        device_id=0x4001,
        kind=FunctionKind.VF,
        physfn=pf.address,
        driver=driver,
        iommu_group=100 + n,
    )


def plan(functions: list[PciFunction], **kw: object) -> devices.Plan:
    args: dict[str, object] = {"settings": devices.NodeSettings(), "shares": 16, "health": {}, "iommu_enabled": True}
    args.update(kw)
    return devices.plan_devices(functions, **args)  # type: ignore[arg-type]


# --- labels ---------------------------------------------------------------------------------------------


def test_labels_default_to_native_best_effort() -> None:
    assert devices.settings_from_labels({}) == devices.NodeSettings(devices.Mode.NATIVE, devices.QosPolicy.BEST_EFFORT)


def test_labels_select_sgpu_and_policy() -> None:
    s = devices.settings_from_labels({devices.MODE_LABEL: "sgpu", devices.QOS_LABEL: "burst-share"})
    assert (s.mode, s.qos, s.problems) == (devices.Mode.SGPU, devices.QosPolicy.BURST_SHARE, ())


def test_unknown_label_values_fall_back_with_reasons() -> None:
    s = devices.settings_from_labels({devices.MODE_LABEL: "SGPU", devices.QOS_LABEL: "fair"})
    assert (s.mode, s.qos) == (devices.Mode.NATIVE, devices.QosPolicy.BEST_EFFORT)
    assert s.problems == (
        "label metax-tech.com/gpu-device.mode='SGPU' is not one of native, sgpu: running in native mode",
        "label metax-tech.com/gpu-device.qos-policy='fair' is not one of best-effort, fixed-share, burst-share: "
        "using best-effort",
    )


# --- advertising ----------------------------------------------------------------------------------------


def test_native_mode_advertises_one_gpu_per_metax_function() -> None:
    p = plan([fn(10), fn(9), fn(11, driver=None)])
    assert p.active() == {R.GPU}
    assert [d.id for d in p.devices[R.GPU]] == ["0000:09:00.0", "0000:0a:00.0"]
    assert all(d.healthy for d in p.devices[R.GPU])


def test_driver_name_is_matched_case_insensitively() -> None:
    assert [d.id for d in plan([fn(9, driver="METAX")]).devices[R.GPU]] == ["0000:09:00.0"]


def test_pf_with_vfs_is_not_advertised_its_vfs_are() -> None:
    pf = fn(9, sriov_numvfs=2)
    p = plan([pf, vf_of(pf, 1), vf_of(pf, 2), fn(10)])
    assert [d.id for d in p.devices[R.GPU]] == ["0000:09:00.1", "0000:09:00.2", "0000:0a:00.0"]


def test_pf_listing_vfs_is_not_advertised_even_before_they_show_up() -> None:
    pf = fn(9, vfs=(PciAddress("0000:09:00.1"),))
    assert plan([pf]).devices[R.GPU] == ()


def test_sgpu_mode_advertises_shares_per_gpu_and_no_gpu() -> None:
    p = plan([fn(9), fn(10)], settings=devices.NodeSettings(mode=devices.Mode.SGPU), shares=16)
    assert p.active() == {R.SGPU}
    ids = [d.id for d in p.devices[R.SGPU]]
    assert len(ids) == 32 and len(set(ids)) == 32
    assert ids[:2] == ["0000:09:00.0-00", "0000:09:00.0-01"] and ids[-1] == "0000:0a:00.0-15"


def test_shares_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1, got 0"):
        plan([fn(9)], shares=0)


def test_vfio_bound_functions_are_vfio_gpu() -> None:
    pf = fn(9, sriov_numvfs=1)
    p = plan([pf, vf_of(pf, 1, driver="vfio-pci"), fn(10, driver="vfio-pci"), fn(11)])
    assert p.active() == {R.GPU, R.VFIO_GPU}
    assert [d.id for d in p.devices[R.VFIO_GPU]] == ["0000:09:00.1", "0000:0a:00.0"]
    assert [d.id for d in p.devices[R.GPU]] == ["0000:0b:00.0"]


def test_vfio_needs_iommu_and_a_group() -> None:
    assert plan([fn(9, driver="vfio-pci")], iommu_enabled=False).active() == {R.GPU}
    p = plan([fn(9, driver="vfio-pci"), fn(10, driver="vfio-pci", iommu_group=None)])
    assert [d.id for d in p.devices[R.VFIO_GPU]] == ["0000:09:00.0"]
    assert p.problems == ("0000:0a:00.0 is bound to vfio-pci but has no IOMMU group: not advertised",)


def test_not_ready_makes_every_device_unhealthy_with_the_reason() -> None:
    p = plan([fn(9), fn(10, driver="vfio-pci")], ready=False, not_ready_reason="maca not ready: installing")
    everything = [*p.devices[R.GPU], *p.devices[R.VFIO_GPU]]
    assert {(d.healthy, d.reason) for d in everything} == {(False, "maca not ready: installing")}


def test_unhealthy_function_makes_its_shares_unhealthy() -> None:
    a = fn(9)
    p = plan(
        [a],
        settings=devices.NodeSettings(mode=devices.Mode.SGPU),
        shares=2,
        health={a.address: devices.Health(False, "hot")},
    )
    assert {(d.healthy, d.reason) for d in p.devices[R.SGPU]} == {(False, "hot")}


# --- preferred allocation -------------------------------------------------------------------------------


def place(
    i: str, gpu: str | None = None, numa: int | None = None, path: tuple[str, ...] = ()
) -> preferred_allocation.Placement:
    return preferred_allocation.Placement(i, PciAddress(gpu or i), numa, tuple(PciAddress(p) for p in path))


EIGHT = [place(f"g{i}", numa=i // 4, path=(f"root{i // 4}", f"switch{i // 2}")) for i in range(8)]


def test_prefers_a_shared_switch_then_a_shared_numa_node() -> None:
    assert preferred_allocation.preferred_allocation(EIGHT, [], 2) == ("g0", "g1")
    assert preferred_allocation.preferred_allocation(EIGHT, [], 4) == ("g0", "g1", "g2", "g3")
    assert preferred_allocation.preferred_allocation(EIGHT, ["g5"], 2) == ("g4", "g5")
    assert preferred_allocation.preferred_allocation(EIGHT, ["g5"], 3) == ("g4", "g5", "g6")
    assert preferred_allocation.preferred_allocation([EIGHT[0], EIGHT[2], EIGHT[4], EIGHT[5]], [], 2) == ("g4", "g5")


def test_numa_decides_when_there_are_no_switches() -> None:
    flat = [place("a", numa=0), place("b", numa=1), place("c", numa=0)]
    assert preferred_allocation.preferred_allocation(flat, [], 2) == ("a", "c")


def test_prefers_distinct_gpus_for_shares() -> None:
    shares = [place(f"{g}-{s}", gpu=g, numa=0, path=("r", "sw")) for g in ("x", "y") for s in range(3)]
    assert preferred_allocation.preferred_allocation(shares, [], 2) == ("x-0", "y-0")
    three = preferred_allocation.preferred_allocation(shares, ["y-2"], 3)
    assert "y-2" in three and {i[0] for i in three} == {"x", "y"}


def test_must_include_beyond_size_returns_them_all() -> None:
    assert preferred_allocation.preferred_allocation(EIGHT, ["g7", "g0", "g3"], 2) == ("g0", "g3", "g7")


placements = st.lists(
    st.builds(
        place,
        st.text("abcdefgh", min_size=1, max_size=3),
        st.none() | st.sampled_from(["p", "q", "r", "s"]),
        st.none() | st.integers(0, 2),
        st.lists(st.sampled_from(["r0", "r1", "s0", "s1"]), max_size=3).map(tuple),
    ),
    max_size=12,
    unique_by=lambda p: p.id,
)


@given(placements, st.data())
def test_properties_of_preferred_allocation(
    available: list[preferred_allocation.Placement], data: st.DataObject
) -> None:
    ids = [p.id for p in available]
    must = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    size = data.draw(st.integers(0, len(ids) + 2))

    chosen = preferred_allocation.preferred_allocation(available, must, size)

    assert set(chosen) <= set(ids), "never a device that is not available"
    assert set(must) <= set(chosen), "must-include devices always included"
    assert len(chosen) == max(len(must), min(size, len(ids))), "the requested size when possible"
    assert len(set(chosen)) == len(chosen)
    shuffled = list(available)
    random.Random(size).shuffle(shuffled)
    assert preferred_allocation.preferred_allocation(shuffled, list(reversed(must)), size) == chosen, "deterministic"


# --- allocation -----------------------------------------------------------------------------------------

NODES = {
    PciAddress("0000:09:00.0"): ("/dev/dri/card0", "/dev/mxcd"),
    PciAddress("0000:0a:00.0"): ("/dev/dri/card1", "/dev/mxcd"),
}


def allocate(p: devices.Plan, resource: devices.Resource, ids: list[str], **kw: object) -> devices.ContainerAllocation:
    args: dict[str, object] = {"plan": p, "device_nodes": NODES, "qos": devices.QosPolicy.BEST_EFFORT, "shares": 16}
    args.update(kw)
    return devices.plan_allocation(resource, ids, **args)  # type: ignore[arg-type]


def test_gpu_allocation() -> None:
    a = allocate(plan([fn(9), fn(10)]), R.GPU, ["0000:0a:00.0", "0000:09:00.0"])
    assert a.envs == {"METAX_VISIBLE_DEVICES": "0000:09:00.0,0000:0a:00.0"}
    assert [d.host_path for d in a.devices] == ["/dev/dri/card0", "/dev/mxcd", "/dev/dri/card1"]
    assert a.cdi_devices == ("metax-tech.com/gpu=0000-09-00.0", "metax-tech.com/gpu=0000-0a-00.0")
    assert allocate(plan([fn(9)]), R.GPU, ["0000:09:00.0"], with_cdi=False).cdi_devices == ()


def test_sgpu_allocation_carries_policy_and_shares() -> None:
    p = plan([fn(9), fn(10)], settings=devices.NodeSettings(mode=devices.Mode.SGPU), shares=4)
    a = allocate(p, R.SGPU, ["0000:09:00.0-01", "0000:09:00.0-03"], qos=devices.QosPolicy.FIXED_SHARE, shares=4)
    assert a.envs == {
        "METAX_VISIBLE_DEVICES": "0000:09:00.0",
        "METAX_SGPU_QOS_POLICY": "fixed-share",
        "METAX_SGPU_SHARES_PER_GPU": "4",
        "METAX_SGPU_SHARES": "0000:09:00.0=2",
    }
    assert a.cdi_devices == ("metax-tech.com/gpu=0000-09-00.0",)


def test_vfio_allocation_for_kubevirt() -> None:
    a = allocate(
        plan([fn(9, driver="vfio-pci"), fn(10, driver="vfio-pci")]), R.VFIO_GPU, ["0000:0a:00.0", "0000:09:00.0"]
    )
    assert [d.host_path for d in a.devices] == ["/dev/vfio/vfio", "/dev/vfio/9", "/dev/vfio/10"]
    assert a.envs == {
        "PCI_RESOURCE_METAX-TECH_COM_VFIO-GPU": "0000:09:00.0,0000:0a:00.0",
        "PCI_RESOURCE_METAX_TECH_COM_VFIO_GPU": "0000:09:00.0,0000:0a:00.0",
    }
    assert a.cdi_devices == ()


def test_unknown_and_unhealthy_devices_are_refused() -> None:
    p = plan([fn(9)], health={PciAddress("0000:09:00.0"): devices.Health(False, "Xid 79")})
    with pytest.raises(devices.AllocationRefused, match="0000:0b:00.0: not advertised"):
        allocate(p, R.GPU, ["0000:0b:00.0"])
    with pytest.raises(devices.AllocationRefused, match="0000:09:00.0: unhealthy: Xid 79"):
        allocate(p, R.GPU, ["0000:09:00.0"])


def test_the_allocation_key_is_the_resource_and_the_ids_in_any_order() -> None:
    key = devices.allocation_key(R.SGPU, ["0000:0a:00.0-01", "0000:09:00.0-03", "0000:09:00.0-01"])
    assert key == (R.SGPU, ("0000:09:00.0-01", "0000:09:00.0-03", "0000:0a:00.0-01"))
    assert devices.allocation_key(R.GPU, ["0000:0a:00.0", "0000:09:00.0"]) == devices.allocation_key(
        R.GPU, ("0000:09:00.0", "0000:0a:00.0")
    )
    assert devices.allocation_key(R.GPU, ["0000:09:00.0"]) != devices.allocation_key(R.VFIO_GPU, ["0000:09:00.0"])


ALLOCATABLE = (
    (R.GPU, plan([fn(9), fn(10)]), ["0000:09:00.0", "0000:0a:00.0"]),
    (
        R.SGPU,
        plan([fn(9), fn(10)], settings=devices.NodeSettings(mode=devices.Mode.SGPU), shares=4),
        ["0000:09:00.0-00", "0000:09:00.0-02", "0000:0a:00.0-01", "0000:0a:00.0-03"],
    ),
    (R.VFIO_GPU, plan([fn(9, driver="vfio-pci"), fn(10, driver="vfio-pci")]), ["0000:09:00.0", "0000:0a:00.0"]),
)


@given(st.sampled_from(ALLOCATABLE), st.data())
def test_an_allocation_depends_on_the_ids_only_through_their_key(
    case: tuple[devices.Resource, devices.Plan, list[str]], data: st.DataObject
) -> None:
    """What lets gpu-device keep answers per `allocation_key`: the same key, the same allocation."""
    resource, p, ids = case
    chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=len(ids), unique=True))
    reordered = data.draw(st.permutations(chosen))
    assert devices.allocation_key(resource, chosen) == devices.allocation_key(resource, reordered)
    assert allocate(p, resource, chosen, shares=4) == allocate(p, resource, list(reordered), shares=4)


def test_socket_names_are_distinct_per_resource() -> None:
    assert [r.socket_name for r in R] == ["metax-gpu.sock", "metax-sgpu.sock", "metax-vfio-gpu.sock"]


def test_cdi_devices_cover_gpu_and_sgpu_functions_only() -> None:
    p = plan([fn(9), fn(10, driver="vfio-pci")])
    assert [d.name for d in devices.cdi_devices(p, NODES)] == ["0000-09-00.0"]
    assert devices.cdi_devices(p, NODES)[0].device_nodes == ("/dev/dri/card0", "/dev/mxcd")


def test_a_gpu_that_is_not_fine_is_offered_unhealthy_with_the_verdicts_words() -> None:
    """R-HEALTH: degraded and unusable alike (the kubelet has no third state)."""
    assert devices.Health.of(verdict.FINE) == devices.Health(True)
    hot = verdict.Verdict((Fault(FaultKind.THERMAL, "hotspot 97 °C"),))
    assert devices.Health.of(hot) == devices.Health(False, "Thermal: hotspot 97 °C")
