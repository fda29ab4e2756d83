"""The uninstall protocol and undo decisions (`metax_core.node.uninstall`, R-INSTALL).

Covers: the request and answer annotations round-trip (what the operator writes the agents read, what an
agent writes the operator reads) and unreadable answers count as none; the finalizer's decision (waits for
every agent that runs on a node, requests the nodes that lack the request, ignores answers to an earlier
request, proceeds at the timeout naming the nodes, reports what stays); the first-touch record round-trips
and bad records are refused by field; the driver undo per baseline: no module before install → unload,
host module with other parameters or version → reload, interrupted after the unload → load, VF counts
back (to 0 before a module step, to the recorded count after), nothing to do when the host is as found;
driver-manager's undo waits for vfio-manager's answer to this request on a node where vfio-manager ran.
"""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from metax_core.inventory import FunctionKind, ModuleState, PciAddress, PciFunction
from metax_core.node import uninstall, vfio

A, B = PciAddress("0000:03:00.0"), PciAddress("0000:83:00.0")


def pf(address: PciAddress, numvfs: int = 0, total: int = 4) -> PciFunction:
    return PciFunction(
        address=address, vendor_id=0x9999, device_id=0x4000, driver="metax", sriov_totalvfs=total, sriov_numvfs=numvfs
    )


def vf(address: str, parent: PciAddress) -> PciFunction:
    return PciFunction(
        address=PciAddress(address), vendor_id=0x9999, device_id=0x4000, kind=FunctionKind.VF, physfn=parent
    )


# --- annotations ---------------------------------------------------------------------------------------------


def test_the_request_round_trips_and_an_empty_one_is_none() -> None:
    assert uninstall.requested(uninstall.render_request("uid-1")) == "uid-1"
    assert uninstall.requested({uninstall.REQUEST_ANNOTATION: " "}) is None
    assert uninstall.requested({}) is None and uninstall.requested(None) is None
    with pytest.raises(ValueError, match="uid"):
        uninstall.render_request("")


@pytest.mark.parametrize("agent", uninstall.AGENTS)
def test_each_agents_answer_round_trips(agent: str) -> None:
    done = uninstall.Done("uid-1", ("metax module: in use by 1 process",))
    assert uninstall.answers(uninstall.render_done(agent, done)) == {agent: done}


def test_unreadable_or_foreign_answers_are_no_answer() -> None:
    annotations = {
        uninstall.DONE_PREFIX + "driver": "{not json",
        uninstall.DONE_PREFIX + "gpu-label": '{"kept": []}',
        uninstall.DONE_PREFIX + "someone-else": '{"request": "uid-1"}',
        "metax-tech.com/gpu-vfio": '{"0": 1}',
    }
    assert uninstall.answers(annotations) == {}
    with pytest.raises(ValueError, match="unknown agent"):
        uninstall.done_key("topo-worker")


# --- the finalizer's decision --------------------------------------------------------------------------------


def node(name: str, agents: set[str], **annotations: str) -> uninstall.NodeUndo:
    return uninstall.NodeUndo(name, frozenset(agents), annotations)


def answered(uid: str, *agents: str, kept: tuple[str, ...] = ()) -> dict[str, str]:
    out: dict[str, str] = dict(uninstall.render_request(uid))
    for a in agents:
        out.update(uninstall.render_done(a, uninstall.Done(uid, kept)))
    return out


def test_the_driver_goes_after_vfio_manager_where_vfio_manager_ran() -> None:
    ran = {vfio.ANNOTATION: '{"0":1}', **uninstall.render_request("u1")}
    assert uninstall.driver_waits(ran, "u1") is not None
    assert uninstall.driver_waits({**ran, **uninstall.render_done("vfio-manager", uninstall.Done("u0"))}, "u1")
    assert uninstall.driver_waits({**ran, **uninstall.render_done("vfio-manager", uninstall.Done("u1"))}, "u1") is None
    assert uninstall.driver_waits(uninstall.render_request("u1"), "u1") is None  # vfio-manager never ran here
    assert uninstall.driver_waits(None, "u1") is None


def test_the_finalizer_requests_then_waits_for_every_agent_on_every_node() -> None:
    nodes = [node("n1", {"driver", "gpu-label"}), node("n2", set())]
    first = uninstall.finalize(nodes, "u", waited=0, timeout=60)
    assert first.to_request == ("n1",) and not first.proceed and first.waiting == {"n1": ("driver", "gpu-label")}
    half = uninstall.finalize(
        [node("n1", {"driver", "gpu-label"}, **answered("u", "driver"))], "u", waited=5, timeout=60
    )
    assert half.to_request == () and not half.proceed and half.waiting == {"n1": ("gpu-label",)}
    assert "n1 (gpu-label)" in half.message
    done = uninstall.finalize(
        [node("n1", {"driver", "gpu-label"}, **answered("u", "driver", "gpu-label"))], "u", waited=5, timeout=60
    )
    assert done.proceed and not done.timed_out and done.waiting == {}


def test_answers_to_an_earlier_uninstall_do_not_count() -> None:
    stale = {**answered("old", "driver"), **uninstall.render_request("u")}
    decision = uninstall.finalize([node("n1", {"driver"}, **stale)], "u", waited=1, timeout=60)
    assert not decision.proceed and decision.waiting == {"n1": ("driver",)}


def test_the_wait_is_bounded_and_names_the_nodes_that_did_not_answer() -> None:
    nodes = [node("n1", {"driver"}, **answered("u", "driver")), node("n2", {"driver", "gpu-device"})]
    decision = uninstall.finalize(nodes, "u", waited=60, timeout=60)
    assert decision.proceed and decision.timed_out
    assert decision.waiting == {"n2": ("driver", "gpu-device")}
    assert "did not answer" in decision.message and "n2 (driver, gpu-device)" in decision.message


def test_a_thousand_silent_nodes_make_a_message_a_person_can_read_and_an_event_can_carry() -> None:
    """At 1,000 nodes the message named every node (35 kB): the status write it went into was refused (the
    condition's maxLength is 32,768) and the uninstall never finished. Now nodes missing the same answers are one
    group, ten named; the largest groups come first, five of them, and the rest are counted."""
    everything = {"container-runtime", "driver", "gpu-device", "gpu-label", "maca", "vfio-manager"}
    nodes = [node(f"kwok-node-{i:04}", everything) for i in range(990)]
    nodes += [node(f"odd-{i}", {"driver", f"agent-{i}"}) for i in range(10)]  # ten groups of one
    decision = uninstall.finalize(nodes, "u", waited=180, timeout=180)
    assert decision.proceed and decision.timed_out and len(decision.waiting) == 1000
    message = decision.message
    assert len(message) <= 1024, len(message)  # an Event's note carries it whole
    first = ", ".join(f"kwok-node-{i:04}" for i in range(10))
    assert f"{first} and 980 more ({', '.join(sorted(everything))})" in message, message
    assert "odd-0 (agent-0, driver); odd-1 (agent-1, driver)" in message, message  # a group of one: as before
    assert message.endswith("and 6 more nodes in 6 more groups"), message  # 1 + 4 groups named of 11


def test_what_stays_on_many_nodes_is_grouped_too() -> None:
    kept = answered("u", "driver", kept=("metax module: in use",))
    decision = uninstall.finalize([node(f"n{i:03}", {"driver"}, **kept) for i in range(500)], "u", waited=0, timeout=60)
    assert decision.proceed and len(decision.kept) == 500
    assert decision.message == (
        "every node undid what the agents did (kept: "
        + ", ".join(f"n{i:03}" for i in range(10))
        + " and 490 more: driver: metax module: in use)"
    )


def test_what_stays_is_reported() -> None:
    n = node("n1", {"driver"}, **answered("u", "driver", kept=("metax module: in use",)))
    decision = uninstall.finalize([n], "u", waited=0, timeout=60)
    assert decision.proceed and decision.kept == {"n1": ("driver: metax module: in use",)}
    assert "kept: n1: driver: metax module: in use" in decision.message


# --- the first-touch record ----------------------------------------------------------------------------------


def test_the_baseline_of_a_host_round_trips() -> None:
    module = ModuleState("metax", "2.18.0", {"xcore_page_size": "0", "gpu_model": "auto"})
    functions = [pf(A, 2), vf("0000:03:00.1", A), vf("0000:03:00.2", A), pf(B, 0, total=0)]
    b = uninstall.baseline_of(module, functions, ["lib/firmware/metax/c500", "lib/firmware/metax"])
    params = {"xcore_page_size": "0", "gpu_model": "auto"}
    assert b == uninstall.Baseline(True, "2.18.0", params, {A: 2}, ("lib/firmware/metax", "lib/firmware/metax/c500"))
    assert uninstall.parse_baseline(uninstall.render_baseline(b)) == b
    none = uninstall.baseline_of(None, [pf(A)])
    assert uninstall.parse_baseline(uninstall.render_baseline(none)) == uninstall.Baseline(False, vf_counts={A: 0})


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[]", "baseline"),
        ("{", "baseline"),
        ('{"moduleLoaded": "yes"}', "baseline.moduleLoaded"),
        ('{"moduleLoaded": true, "params": {"a": 1}}', "baseline.params"),
        ('{"moduleLoaded": true, "vfCounts": {"0000:03:00.0": -1}}', "baseline.vfCounts"),
        ('{"moduleLoaded": true, "files": "a"}', "baseline.files"),
    ],
)
def test_a_bad_baseline_is_refused_by_field(text: str, field: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        uninstall.parse_baseline(text)
    assert caught.value.errors[0].path == field


# --- the driver undo -----------------------------------------------------------------------------------------


def test_a_host_without_a_module_before_gets_it_unloaded_and_its_vfs_removed_first() -> None:
    b = uninstall.Baseline(False, vf_counts={A: 0})
    undo = uninstall.undo_driver(b, ModuleState("metax", "2.20.0", {}), [pf(A, 2), pf(B, 0)])
    assert undo.module is uninstall.ModuleStep.UNLOAD
    assert undo.before_module == (uninstall.VfWrite(A, 0),) and undo.after_module == ()
    assert uninstall.undo_driver(b, None, [pf(A, 0)]).nothing


def test_the_host_module_is_reloaded_with_its_parameters_and_its_vfs() -> None:
    b = uninstall.Baseline(True, "2.18.0", {"xcore_page_size": "0"}, {A: 2, B: 0})
    undo = uninstall.undo_driver(b, ModuleState("metax", "2.20.0", {"xcore_page_size": "4"}), [pf(A, 4), pf(B, 0)])
    assert undo.module is uninstall.ModuleStep.RELOAD_HOST and undo.params == {"xcore_page_size": "0"}
    assert undo.before_module == (uninstall.VfWrite(A, 0),)
    assert undo.after_module == (uninstall.VfWrite(A, 2),)


def test_only_parameters_differing_reload_too() -> None:
    b = uninstall.Baseline(True, "2.18.0", {"xcore_page_size": "0"}, {})
    undo = uninstall.undo_driver(b, ModuleState("metax", "2.18.0", {"xcore_page_size": "4"}), [pf(A)])
    assert undo.module is uninstall.ModuleStep.RELOAD_HOST


def test_an_undo_interrupted_after_the_unload_loads_the_host_module() -> None:
    b = uninstall.Baseline(True, "2.18.0", {}, {A: 1})
    undo = uninstall.undo_driver(b, None, [pf(A, 0)])
    assert undo.module is uninstall.ModuleStep.LOAD_HOST and undo.after_module == (uninstall.VfWrite(A, 1),)


def test_vf_counts_alone_go_back_through_zero() -> None:
    b = uninstall.Baseline(True, "2.18.0", {}, {A: 1, B: 0})
    undo = uninstall.undo_driver(b, ModuleState("metax", "2.18.0", {}), [pf(A, 3), pf(B, 2)])
    assert undo.module is uninstall.ModuleStep.LEAVE
    assert undo.before_module == (uninstall.VfWrite(A, 0), uninstall.VfWrite(B, 0))
    assert undo.after_module == (uninstall.VfWrite(A, 1),)


def test_a_host_as_found_needs_nothing() -> None:
    b = uninstall.Baseline(True, "2.18.0", {"gpu_model": "auto"}, {A: 2})
    assert uninstall.undo_driver(b, ModuleState("metax", "2.18.0", {"gpu_model": "auto"}), [pf(A, 2)]).nothing


def test_leftovers_are_what_install_added_deepest_first() -> None:
    before = ["lib/firmware/metax", "lib/firmware/metax/c500", "lib/firmware/metax/c500/mxvbios-1.bin"]
    now = [*before, "lib/firmware/metax/1.13.0.0", "lib/firmware/metax/1.13.0.0/virt", "var/lib/metax/drivers"]
    now.append("lib/firmware/metax/1.13.0.0/virt/mxvbios-1.13.0.0.bin")
    assert uninstall.leftovers(before, now) == [
        "lib/firmware/metax/1.13.0.0/virt/mxvbios-1.13.0.0.bin",
        "lib/firmware/metax/1.13.0.0/virt",
        "lib/firmware/metax/1.13.0.0",
        "var/lib/metax/drivers",
    ]
