"""The component catalogue and dependency graph (R-DEP, §3.2.3): order, blocking, readiness requirements."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from metax_core import components
from metax_core.components import Component as C


def test_prerequisites_are_those_of_the_seed_table() -> None:
    expected = {
        C.GPU_LABEL: set(),
        C.RUNTIME: {C.GPU_LABEL},
        C.DRIVER: {C.GPU_LABEL, C.RUNTIME},
        C.MACA: {C.GPU_LABEL, C.RUNTIME},
        C.GPU_DEVICE: {C.GPU_LABEL, C.RUNTIME, C.MACA},
        C.EXPORTER: {C.GPU_LABEL, C.DRIVER},
        C.VFIO_MANAGER: {C.GPU_LABEL},
        C.DRA_DRIVER: {C.GPU_LABEL, C.RUNTIME, C.MACA},  # gpu-device's: the same devices, the other allocator
    }
    for component, prereqs in expected.items():
        assert set(components.BY_COMPONENT[component].prerequisites) == prereqs, component


def test_workload_names_and_privileges_follow_table_1_3_1() -> None:
    workloads = {w.name: w for info in components.CATALOGUE for w in info.workloads}
    assert set(workloads) == {
        "metax-gpu-discovery",  # issue 38 item 3: gpu-label's unprivileged half, on every node
        "metax-gpu-label",
        "metax-container-runtime",
        "metax-driver",
        "metax-maca",
        "metax-gpu-device",
        "metax-data-exporter",
        "metax-vfio-manager",
        "metax-topo-master",
        "metax-topo-worker",
        "metax-gpu-scheduler",
        "metax-dra-driver",  # R-DRA, an extension (privileged like gpu-device, no hostPID)
    }
    assert [n for n, w in workloads.items() if w.host_pid] == [
        "metax-container-runtime",
        "metax-driver",
        "metax-maca",
        "metax-gpu-device",
    ]
    assert {n for n, w in workloads.items() if not w.privileged} == {
        "metax-topo-master",
        "metax-gpu-scheduler",
        "metax-gpu-discovery",
    }
    assert [n for n, w in workloads.items() if w.everywhere] == ["metax-gpu-discovery"]  # privilege: GPU nodes only
    assert [n for n, w in workloads.items() if not w.publishes_readiness] == ["metax-gpu-discovery"]
    assert workloads["metax-data-exporter"].service_account is None
    assert all(w.service_account == n for n, w in workloads.items() if n != "metax-data-exporter")


@given(st.sets(st.sampled_from(list(C))))
def test_deploy_order_puts_every_prerequisite_first(chosen: set[C]) -> None:
    order = components.deploy_order(chosen)
    assert sorted(order, key=lambda c: c.value) == sorted(chosen, key=lambda c: c.value)
    for i, c in enumerate(order):
        for p in components.BY_COMPONENT[c].prerequisites:
            if p in chosen:
                assert order.index(p) < i


@given(st.sets(st.sampled_from(list(C))))
def test_plan_deploys_only_components_whose_prerequisites_are_all_deployed(on: set[C]) -> None:
    plan = components.plan(on)
    deployed = set(plan.deploy)
    for c in deployed:
        assert set(components.BY_COMPONENT[c].prerequisites) <= deployed
    assert deployed | {b.component for b in plan.blocked} == on
    assert set(plan.disabled) == set(C) - on


def test_disabled_runtime_blocks_driver_and_transitively_the_exporter() -> None:
    plan = components.plan(set(C) - {C.RUNTIME})
    blocked = {b.component: b for b in plan.blocked}
    assert blocked[C.DRIVER].disabled == (C.RUNTIME,)
    assert blocked[C.EXPORTER].blocked == (C.DRIVER,)
    assert "disabled prerequisite runtime" in blocked[C.DRIVER].reason
    assert "blocked prerequisite driver" in blocked[C.EXPORTER].reason
    assert C.VFIO_MANAGER in plan.deploy


def test_gpu_device_waits_for_its_prerequisites_and_the_driver_when_deployed() -> None:
    everything = list(C)
    assert components.requirements(C.GPU_DEVICE, everything) == (C.GPU_LABEL, C.RUNTIME, C.DRIVER, C.MACA)
    without_driver = [c for c in C if c is not C.DRIVER]
    assert components.requirements(C.GPU_DEVICE, without_driver) == (C.GPU_LABEL, C.RUNTIME, C.MACA)
    assert components.requirements(C.GPU_LABEL, everything) == ()


def test_readiness_signal_names_are_what_node_agents_publish() -> None:
    from metax_core.node import readiness

    for info in components.CATALOGUE:
        readiness.check_component(info.signal)
    assert components.BY_COMPONENT[C.RUNTIME].signal == "container-runtime"
    assert components.BY_COMPONENT[C.DRIVER].signal == "driver"
