"""Device taints for GPUs that are not fine (R-HEALTH, R-DRA; `metax_core.dra.slices`, `metax_core.dra.health`).

- a GPU that is not fine is published with the taint ``metax-tech.com/gpu-health`` = its worst fault kind,
  ``NoSchedule`` for degraded and unusable alike (never NoExecute); a VF shows its PF's;
- recovery: the next plan drops the taint (one rewrite), then is quiet;
- fallback: where the server does not serve taints (`taints_kept` sees it drop them) such a device is withdrawn;
- steady state: the server's ``timeAdded`` is no change, and a rewrite keeps a standing taint's time;
- a pool with a taint is split into slices of at most 64 devices (the API server's limit);
- holders for the node's report: only claims on a GPU that is not fine are read, their ``reservedFor`` pods
  listed on the GPU's PF and VFs, a claim re-created under the same name is not ours.
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.dra import health, model, prepare, slices
from metax_core.health import faults, verdict
from metax_core.inventory import METAX_VENDOR_ID, FunctionKind, GpuHealth, PciAddress, PciFunction

NODE = slices.NodeRef("node-a", "uid-a")
A, B = PciAddress("0000:09:00.0"), PciAddress("0000:0a:00.0")


def gpu(address: PciAddress, **kw: Any) -> PciFunction:
    return PciFunction(address=address, vendor_id=METAX_VENDOR_ID, device_id=0x4000, driver="metax", **kw)


def sick(*kinds: faults.FaultKind) -> verdict.Verdict:
    return verdict.Verdict(tuple(sorted(faults.Fault(k, "what the tool said") for k in kinds)), since=100.0)


def published(verdicts: dict[PciAddress, verdict.Verdict], *, served: bool = True) -> list[slices.PublishedDevice]:
    facts = slices.NodeFacts("node-a", (gpu(A), gpu(B)), verdicts=verdicts, taints_served=served)
    return list(slices.published_devices(facts))


def bodies(plan: slices.SlicePlan) -> list[dict[str, Any]]:
    return [dict(b) for b in plan.apply]


def device_body(slices_: list[dict[str, Any]], address: PciAddress) -> dict[str, Any]:
    return dict(slices.published_in(slices_, "node-a")[slices.device_name(address)])


@pytest.mark.parametrize(
    ("kinds", "value"),
    [
        ((faults.FaultKind.FELL_OFF_BUS,), "FellOffBus"),  # unusable
        ((faults.FaultKind.THERMAL,), "Thermal"),  # degraded: NoSchedule too
        ((faults.FaultKind.HEALTH_UNKNOWN,), "HealthUnknown"),
        ((faults.FaultKind.THERMAL, faults.FaultKind.STATE), "StateFault"),  # the most severe
        ((faults.FaultKind.NOT_ANSWERING, faults.FaultKind.FELL_OFF_BUS), "FellOffBus"),  # equals: nearest the cause
    ],
)
def test_a_gpu_that_is_not_fine_is_published_with_its_worst_fault_as_a_noschedule_taint(
    kinds: tuple[faults.FaultKind, ...], value: str
) -> None:
    fine, tainted = published({B: sick(*kinds)})
    assert fine.taints == () and "taints" not in fine.body()
    assert tainted.address == B
    assert tainted.body()["taints"] == [{"key": "metax-tech.com/gpu-health", "value": value, "effect": "NoSchedule"}]
    assert slices.TAINT_KEY == "metax-tech.com/gpu-health" and slices.TAINT_EFFECT == "NoSchedule"


def test_a_vf_carries_its_pfs_taint() -> None:
    pf = gpu(A, sriov_numvfs=1, sriov_totalvfs=2)
    vf = gpu(PciAddress("0000:09:00.1"), kind=FunctionKind.VF, physfn=A)
    board = verdict.Board()
    for now in (1.0, 2.0):  # fail_after readings in a row: in force on the PF
        fell = GpuHealth(A, faults=(faults.Fault(faults.FaultKind.FELL_OFF_BUS, "config space reads 0xffff"),))
        board = verdict.step(board, [A, vf.address], {A: fell}, now=now).board
    facts = slices.NodeFacts("node-a", (pf, vf), verdicts=verdict.verdicts(board, (pf, vf)))
    (only,) = slices.published_devices(facts)
    assert only.address == vf.address and [t.value for t in only.taints] == ["FellOffBus"]


def test_recovery_removes_the_taint_in_one_rewrite_then_the_pool_is_quiet() -> None:
    first = bodies(slices.plan_slices(NODE, published({B: sick(faults.FaultKind.STATE)}), []))
    assert device_body(first, B)["taints"][0]["value"] == "StateFault"
    recovered = slices.plan_slices(NODE, published({B: verdict.FINE}), first)
    assert recovered.generation == 2
    assert "taints" not in device_body(bodies(recovered), B)
    assert slices.plan_slices(NODE, published({}), bodies(recovered)).quiet


def test_where_the_server_does_not_serve_taints_a_gpu_that_is_not_fine_is_withdrawn() -> None:
    sent = bodies(slices.plan_slices(NODE, published({B: sick(faults.FaultKind.THERMAL)}), []))[0]
    dropped = {**sent, "spec": {**sent["spec"], "devices": [{**d, "taints": []} for d in sent["spec"]["devices"]]}}
    assert not slices.taints_kept(sent, dropped)
    stamped = _stamped(sent)
    assert slices.taints_kept(sent, stamped)  # the server's timeAdded is no loss
    untainted = bodies(slices.plan_slices(NODE, published({}), []))[0]
    assert slices.taints_kept(untainted, untainted)
    withdrawn = published({B: sick(faults.FaultKind.THERMAL)}, served=False)
    assert [d.address for d in withdrawn] == [A]


def _stamped(body: dict[str, Any], when: str = "2026-12-07T03:00:00Z") -> dict[str, Any]:
    """What the API server stores: every taint with a ``timeAdded``."""
    spec = body["spec"]
    devices = [
        {**d, "taints": [{**t, "timeAdded": when} for t in d["taints"]]} if d.get("taints") else d
        for d in spec["devices"]
    ]
    return {**body, "spec": {**spec, "devices": devices}}


def test_the_servers_time_added_is_no_change_and_a_rewrite_keeps_it() -> None:
    wanted = published({B: sick(faults.FaultKind.THERMAL)})
    stored = [_stamped(b) for b in bodies(slices.plan_slices(NODE, wanted, []))]
    again = slices.plan_slices(NODE, published({B: sick(faults.FaultKind.THERMAL)}), stored)
    assert again.quiet and again.generation == 1
    # Another device turns bad: the pool is rewritten, B's standing taint keeps the time it was added.
    both = slices.plan_slices(
        NODE, published({A: sick(faults.FaultKind.LINK), B: sick(faults.FaultKind.THERMAL)}), stored
    )
    written = bodies(both)
    assert device_body(written, B)["taints"][0]["timeAdded"] == "2026-12-07T03:00:00Z"
    assert "timeAdded" not in device_body(written, A)["taints"][0]  # new: the server stamps it


def test_a_pool_with_a_taint_is_split_into_slices_of_at_most_64_devices() -> None:
    functions = tuple(gpu(PciAddress(f"0000:{i // 32:02x}:{i % 32:02x}.0")) for i in range(100))
    clean = slices.published_devices(slices.NodeFacts("node-a", functions))
    assert [len(b["spec"]["devices"]) for b in slices.plan_slices(NODE, clean, []).apply] == [100]
    tainted = slices.published_devices(
        slices.NodeFacts("node-a", functions, verdicts={functions[5].address: sick(faults.FaultKind.POWER)})
    )
    assert [len(b["spec"]["devices"]) for b in slices.plan_slices(NODE, tainted, []).apply] == [64, 36]


# --- holders -----------------------------------------------------------------------------------------------


def _entry(uid: str, name: str, *devices: PciAddress) -> prepare.PreparedClaim:
    prepared = tuple(model.PreparedDevice("node-a", slices.device_name(d), ("gpus",), ()) for d in devices)
    return prepare.PreparedClaim(model.ClaimRef("team", uid, name), prepared)


def _claim(uid: str, *pods: str) -> dict[str, Any]:
    reserved = [{"resource": "pods", "name": p, "uid": f"u-{p}"} for p in pods]
    reserved.append({"apiGroup": "example.com", "resource": "jobs", "name": "not-a-pod", "uid": "j"})
    return {"metadata": {"uid": uid}, "status": {"reservedFor": reserved}}


def test_holders_come_from_the_claims_on_a_gpu_that_is_not_fine_only() -> None:
    on_a, on_b = _entry("uid-1", "train", A), _entry("uid-2", "serve", B)
    checkpoint = prepare.Checkpoint({"uid-1": on_a, "uid-2": on_b})
    names = {slices.device_name(A): A, slices.device_name(B): B}
    assert health.claims_to_read(checkpoint, names, {A: verdict.FINE, B: verdict.FINE}) == ()
    assert health.claims_to_read(checkpoint, names, {B: sick(faults.FaultKind.STATE)}) == (on_b,)
    got = health.holders([(on_b, _claim("uid-2", "web-1", "web-0"))], names, (gpu(A), gpu(B)))
    assert got == {B: ("team/web-0", "team/web-1")}
    assert health.holders([(on_b, _claim("uid-other", "web-1"))], names, (gpu(A), gpu(B))) == {}
    assert health.holders([(on_b, None)], names, (gpu(A), gpu(B))) == {}


def test_a_pod_holding_a_vf_holds_its_gpu() -> None:
    pf = gpu(A, sriov_numvfs=2, sriov_totalvfs=2)
    vfs = tuple(gpu(PciAddress(f"0000:09:00.{i}"), kind=FunctionKind.VF, physfn=A) for i in (1, 2))
    names = {slices.device_name(v.address): v.address for v in vfs}
    entry = _entry("uid-1", "train", vfs[0].address)
    got = health.holders([(entry, _claim("uid-1", "trainer"))], names, (pf, *vfs))
    assert got == {A: ("team/trainer",), vfs[0].address: ("team/trainer",), vfs[1].address: ("team/trainer",)}
