"""`metax_core.dra.claims` and `metax_core.dra.prepare` (R-DRA, R-MACA, R-SGPU): a claim's allocation,
its configuration, the per-claim CDI spec and the checkpoint.

- only this driver's results in this node's pool count; none -> NotAllocated;
- configuration: class entries first, then the claim's, per request (sub-requests inherit the parent's);
  bad parameters refused naming the field and what is allowed;
- prepare: one CDI spec per claim (its own kind), device nodes per device, the claim's env (visible
  devices, the SDK the prefix resolves to, sharing) at the top, CDI ids the kubelet passes on; refusals
  say why (not published, no matching SDK, conflicting configs, uid mismatch);
- checkpoint: round trip; a changed or cut file is refused with the field named.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.dra import DRIVER, claims, model, prepare, slices
from metax_core.errors import InvalidSpec
from metax_core.inventory import METAX_VENDOR_ID, PciAddress, PciFunction
from metax_core.node import cdi
from metax_core.runtime import sdk

POOL = "node-a"
REF = model.ClaimRef("ns", "c0ffee00-0000-4000-8000-000000000001", "train")


def config(**fields: object) -> dict[str, Any]:
    return {"apiVersion": claims.CONFIG_API_VERSION, "kind": claims.CONFIG_KIND, **fields}


def claim(results: list[dict[str, Any]], configs: list[dict[str, Any]] = (), uid: str = REF.uid) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "metadata": {"namespace": "ns", "name": "train", "uid": uid},
        "status": {"allocation": {"devices": {"results": results, "config": list(configs)}}},
    }


def result(device: str, request: str = "gpus", driver: str = DRIVER, pool: str = POOL) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def entry(params: dict[str, Any], source: str = "FromClaim", requests: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"source": source, "opaque": {"driver": DRIVER, "parameters": params}}
    if requests is not None:
        out["requests"] = requests
    return out


def test_only_this_drivers_results_in_this_pool_are_the_allocation() -> None:
    c = claim([result("gpu-a"), result("gpu-b", pool="node-b"), result("x", driver="other.example.com")])
    got = claims.allocated(c, POOL)
    assert [d.device for d in got.devices] == ["gpu-a"]
    with pytest.raises(claims.NotAllocated):
        claims.allocated(claim([result("gpu-b", pool="node-b")]), POOL)
    with pytest.raises(claims.NotAllocated):
        claims.allocated({"metadata": {}, "status": {}}, POOL)


def test_claim_configuration_overrides_the_class_and_subrequests_inherit() -> None:
    c = claim(
        [result("gpu-a", request="gpus/big")],
        [
            entry(config(macaVersion="maca-2.18"), source="FromClaim"),
            entry(config(macaVersion="maca-2", sharing={"shares": 4}), source="FromClass"),
            {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"anything": 1}}},
        ],
    )
    got = claims.allocated(c, POOL).config_for("gpus/big")
    assert got.maca_version == "maca-2.18"  # the claim's, though listed first
    assert got.sharing == claims.Sharing(4)


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"kind": "GpuConfig"}, "parameters.apiVersion", claims.CONFIG_API_VERSION),
        (config(kind="Other"), "parameters.kind", "GpuConfig"),
        (config(macaVersion="2.18"), "parameters.macaVersion", "maca-2"),
        (config(macaVersion=2), "parameters.macaVersion", "string"),
        (config(sharing={"shares": 0}), "parameters.sharing.shares", "from 1 to 16"),
        (config(sharing={"shares": 2, "qosPolicy": "fast"}), "parameters.sharing.qosPolicy", "burst-share"),
        (config(sharing={"shares": 2, "color": 1}), "parameters.sharing.color", "unknown field"),
        (config(gpus=2), "parameters.gpus", "allowed: apiVersion, kind, macaVersion, sharing"),
    ],
)
def test_bad_configuration_names_the_field_and_what_is_allowed(params: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        claims.parse_config(params)
    assert any(e.path == field and says in e.message for e in caught.value.errors), caught.value.errors


def test_a_bad_configuration_in_the_allocation_is_named_by_its_place() -> None:
    c = claim([result("gpu-a")], [entry(config()), entry(config(macaVersion="two"))])
    with pytest.raises(InvalidSpec) as caught:
        claims.allocated(c, POOL)
    assert caught.value.errors[0].path == "status.allocation.devices.config[1].opaque.parameters.macaVersion"


# --- prepare --------------------------------------------------------------------------------------------------


def inputs(*buses: int, sdks: tuple[str, ...] = ()) -> prepare.Inputs:
    functions = tuple(
        PciFunction(
            address=PciAddress(f"0000:{b:02x}:00.0"), vendor_id=METAX_VENDOR_ID, device_id=0x4000, driver="metax"
        )
        for b in buses
    )
    published = {d.name: d for d in slices.published_devices(slices.NodeFacts(POOL, functions))}
    nodes = {f.address: (f"/dev/dri/card{i}", f"/dev/dri/renderD{128 + i}") for i, f in enumerate(functions)}
    return prepare.Inputs(published, nodes, installed_sdks=sdks)


def test_prepare_writes_one_spec_per_claim_with_the_claims_environment() -> None:
    c = claim(
        [result("gpu-0000-09-00-0"), result("gpu-0000-0a-00-0")],
        [entry(config(macaVersion="maca-2.18", sharing={"shares": 2, "qosPolicy": "fixed-share"}))],
    )
    got = prepare.prepare(REF, c, POOL, inputs(0x09, 0x0A, sdks=("2.18.0.3", "2.18.1.0", "2.19.0.0")))
    assert [d.device for d in got.outcome.devices] == ["gpu-0000-09-00-0", "gpu-0000-0a-00-0"]
    ids = [i for d in got.outcome.devices for i in d.cdi_ids]
    assert ids == [
        f"{prepare.CLAIM_KIND}={REF.uid}-gpu-0000-09-00-0",
        f"{prepare.CLAIM_KIND}={REF.uid}-gpu-0000-0a-00-0",
    ]
    names = {d["name"] for d in got.spec["devices"]}
    assert {i.partition("=")[2] for i in ids} == names
    assert got.spec["kind"] == prepare.CLAIM_KIND
    assert got.spec["cdiVersion"] in cdi.KNOWN_VERSIONS
    env = got.spec["containerEdits"]["env"]
    assert "METAX_VISIBLE_DEVICES=0000:09:00.0,0000:0a:00.0" in env
    assert f"{sdk.RESOLVED_ENV}=2.18.1.0" in env  # the newest matching the prefix
    assert "METAX_SGPU_QOS_POLICY=fixed-share" in env and "METAX_SGPU_SHARES=2" in env
    (mount,) = got.spec["containerEdits"]["mounts"]
    assert mount["hostPath"] == f"{sdk.HOST_DIR}/2.18.1.0" and mount["containerPath"] == sdk.MOUNT_PATH
    assert prepare.spec_file_name(REF.uid) == f"metax-tech.com-claim_{REF.uid}.json"


@pytest.mark.parametrize(
    ("c", "says"),
    [
        (claim([result("gpu-0000-0b-00-0")]), "not published"),
        (claim([result("gpu-0000-09-00-0")], [entry(config(macaVersion="maca-3"))]), "no installed MXMACA version"),
        (claim([result("gpu-0000-09-00-0")], uid="other"), "has uid"),
        (claim([result("gpu-0000-09-00-0", pool="elsewhere")]), "no device"),
        (claim([result("gpu-0000-09-00-0")], [entry(config(sharing={"shares": 99}))]), "sharing.shares"),
        (
            claim(
                [result("gpu-0000-09-00-0", request="a"), result("gpu-0000-0a-00-0", request="b")],
                [
                    entry(config(macaVersion="maca-2"), requests=["a"]),
                    entry(config(macaVersion="maca-2.18"), requests=["b"]),
                ],
            ),
            "different maca version",
        ),
    ],
)
def test_a_claim_that_cannot_be_prepared_says_why(c: dict[str, Any], says: str) -> None:
    with pytest.raises(prepare.PrepareRefused, match=says):
        prepare.prepare(REF, c, POOL, inputs(0x09, 0x0A, sdks=("2.18.0.3",)))


def test_the_checkpoint_round_trips_and_refuses_a_changed_file() -> None:
    got = prepare.prepare(REF, claim([result("gpu-0000-09-00-0")]), POOL, inputs(0x09))
    point = prepare.Checkpoint().with_claim(prepare.PreparedClaim(REF, got.outcome.devices))
    text = prepare.render_checkpoint(point)
    assert prepare.parse_checkpoint(text) == point
    assert prepare.parse_checkpoint(prepare.render_checkpoint(point.without(REF.uid))) == prepare.Checkpoint()
    tampered = text.replace("gpu-0000-09-00-0", "gpu-0000-0a-00-0", 1)
    with pytest.raises(InvalidSpec) as caught:
        prepare.parse_checkpoint(tampered)
    assert caught.value.errors[0].path == "checksum"
    for broken, field in ((text[: len(text) // 2], "checkpoint"), ('{"version": 2}', "version")):
        with pytest.raises(InvalidSpec) as caught:
            prepare.parse_checkpoint(broken)
        assert caught.value.errors[0].path == field


@given(
    st.dictionaries(
        st.uuids().map(str),
        st.lists(
            st.sampled_from(["gpu-0000-09-00-0", "gpu-0000-0a-00-0", "gpu-0000-0b-00-0"]), min_size=1, unique=True
        ),
        max_size=5,
    )
)
def test_any_checkpoint_reads_back_as_written(entries: dict[str, list[str]]) -> None:
    point = prepare.Checkpoint(
        {
            uid: prepare.PreparedClaim(
                model.ClaimRef("ns", uid, f"c-{i}"),
                tuple(model.PreparedDevice(POOL, d, ("gpus",), (f"{prepare.CLAIM_KIND}={uid}-{d}",)) for d in names),
            )
            for i, (uid, names) in enumerate(entries.items())
        }
    )
    assert prepare.parse_checkpoint(prepare.render_checkpoint(point)) == point


def test_admission_names_the_bad_field_of_this_drivers_configuration_only() -> None:
    devices = {
        "config": [
            {"opaque": {"driver": "other.example.com", "parameters": {"anything": True}}},
            {"opaque": {"driver": DRIVER, "parameters": config(sharing={"shares": 2, "qosPolicy": "fast"})}},
            {"requests": ["gpus"]},
        ]
    }
    (error,) = claims.devices_spec_errors(devices, "spec.spec.devices")
    assert error.path == "spec.spec.devices.config[1].opaque.parameters.sharing.qosPolicy"
    assert claims.devices_spec_errors({"config": [{"opaque": {"driver": DRIVER, "parameters": config()}}]}, "x") == []
    assert claims.devices_spec_errors(None, "spec.devices") == []
