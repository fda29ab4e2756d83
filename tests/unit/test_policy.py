"""Driver deploy policy (R-DRIVER, Table 3.5) and firmware policy (R-FW, §3.2.9, Tables 3.17/3.18).

Covered: each deploy policy with and without a host driver; PreferNewer's numeric (not lexical) comparison,
equal versions, unparseable versions; a missing payload version; the firmware rules (policy Never, physical
machines only, PFs only, the 1.12.0.0 boundary naming the GPUs on each side, no non-virt → virt, skipping
current GPUs, never downgrading, image choice); the firmware edit lock; the NodeNeedReboot constants.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.errors import MetaxError
from metax_core.inventory import (
    DriverVersion,
    FirmwareInfo,
    FunctionKind,
    PciAddress,
    PciFunction,
)
from metax_core.node import policy
from metax_core.node.policy import DriverSource, FirmwareImage, FirmwareOutcome
from metax_core.spec import model as spec

CLOUD = spec.DeployPolicy.PREFER_CLOUD
HOST = spec.DeployPolicy.PREFER_HOST
NEWER = spec.DeployPolicy.PREFER_NEWER
NEVER = spec.DeployPolicy.NEVER
FW_CLOUD = spec.FirmwarePolicy.PREFER_CLOUD
FW_NEVER = spec.FirmwarePolicy.NEVER


def dv(text: str) -> DriverVersion:
    return DriverVersion(text)


# --- R-DRIVER -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deploy_policy", "host", "payload", "source", "version"),
    [
        (CLOUD, None, "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (CLOUD, "3.0.0", "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (HOST, "2.10.0", "2.18.0", DriverSource.HOST, "2.10.0"),
        (HOST, None, "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (HOST, "", "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (NEWER, "2.19.0", "2.18.0", DriverSource.HOST, "2.19.0"),
        (NEWER, "2.17.9", "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (NEWER, None, "2.18.0", DriverSource.PAYLOAD, "2.18.0"),
        (NEVER, "2.10.0", None, DriverSource.UNMANAGED, "2.10.0"),
        (NEVER, None, None, DriverSource.UNMANAGED, None),
        (NEVER, None, "2.18.0", DriverSource.UNMANAGED, None),
    ],
)
def test_table_3_5(
    deploy_policy: spec.DeployPolicy, host: str | None, payload: str | None, source: DriverSource, version: str | None
) -> None:
    choice = policy.choose_driver(deploy_policy, None if host is None else dv(host), payload)
    assert (choice.source, choice.version) == (source, version)
    assert deploy_policy.value in choice.reason


def test_prefer_newer_compares_numbers_not_strings() -> None:
    # "2.18.10" < "2.18.9" as strings; as versions it is newer.
    assert policy.choose_driver(NEWER, dv("2.18.10"), "2.18.9").source is DriverSource.HOST
    assert policy.choose_driver(NEWER, dv("2.9.0"), "2.18.0").source is DriverSource.PAYLOAD
    assert policy.choose_driver(NEWER, dv("10.0"), "9.99.99").source is DriverSource.HOST


@pytest.mark.parametrize(("host", "payload"), [("2.18.0", "2.18.0"), ("2.18", "2.18.0"), ("2.18.0.0", "2.18")])
def test_prefer_newer_equal_versions_use_the_payload(host: str, payload: str) -> None:
    choice = policy.choose_driver(NEWER, dv(host), payload)
    assert choice.source is DriverSource.PAYLOAD
    assert "the same as" in choice.reason


def test_prefer_newer_reads_image_tags_and_v_prefixes() -> None:
    assert policy.choose_driver(NEWER, dv("v2.19.1"), "2.18.0-ubuntu22.04-amd64").source is DriverSource.HOST
    assert policy.choose_driver(NEWER, dv("2.17.0"), "2.18.0-ubuntu22.04-amd64").source is DriverSource.PAYLOAD


def test_prefer_newer_with_unparseable_host_version_uses_payload_and_says_why() -> None:
    choice = policy.choose_driver(NEWER, dv("custom-build"), "2.18.0")
    assert choice.source is DriverSource.PAYLOAD
    assert choice.version == "2.18.0"
    assert "'custom-build' is not a version number" in choice.reason


def test_prefer_newer_with_unparseable_payload_version_uses_payload_and_says_why() -> None:
    choice = policy.choose_driver(NEWER, dv("2.18.0"), "latest")
    assert choice.source is DriverSource.PAYLOAD
    assert "payload version 'latest' is not a version number" in choice.reason


@pytest.mark.parametrize("deploy_policy", [CLOUD, NEWER])
@pytest.mark.parametrize("payload", [None, "", "  "])
def test_missing_payload_version_is_an_error(deploy_policy: spec.DeployPolicy, payload: str | None) -> None:
    with pytest.raises(
        MetaxError, match=rf"driver.payload.version is required with driver.deployPolicy {deploy_policy.value}"
    ):
        policy.choose_driver(deploy_policy, dv("2.18.0"), payload)


def test_prefer_host_needs_the_payload_only_without_a_host_driver() -> None:
    assert policy.choose_driver(HOST, dv("2.1.0"), None).source is DriverSource.HOST
    with pytest.raises(MetaxError, match="PreferHost"):
        policy.choose_driver(HOST, None, None)


_versions = st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(host=_versions, payload=_versions)
def test_prefer_newer_picks_host_exactly_when_strictly_newer(host: list[int], payload: list[int]) -> None:
    def key(numbers: list[int]) -> list[int]:
        while numbers and numbers[-1] == 0:
            numbers = numbers[:-1]
        return numbers

    choice = policy.choose_driver(NEWER, dv(".".join(map(str, host))), ".".join(map(str, payload)))
    expected = DriverSource.HOST if key(host) > key(payload) else DriverSource.PAYLOAD
    assert choice.source is expected


# --- R-FW -----------------------------------------------------------------------------------------------


def pf(n: int, **kw: object) -> PciFunction:
    return PciFunction(address=PciAddress(f"0000:0{n}:00.0"), vendor_id=0x9999, device_id=0x4000, **kw)  # type: ignore[arg-type]


def vf(n: int, fn: int = 1) -> PciFunction:
    return PciFunction(
        address=PciAddress(f"0000:0{n}:00.{fn}"),
        vendor_id=0x9999,
        device_id=0x4000,
        kind=FunctionKind.VF,
        physfn=PciAddress(f"0000:0{n}:00.0"),
    )


def fw(n: int, version: str, virt: bool = False) -> FirmwareInfo:
    return FirmwareInfo(address=PciAddress(f"0000:0{n}:00.0"), vbios_version=version, virtualization=virt)


def decide(
    firmware: list[FirmwareInfo],
    functions: list[PciFunction] | None = None,
    payload: str | None = "1.13.0.0",
    *,
    virt: bool = False,
    physical: bool = True,
    fw_policy: spec.FirmwarePolicy = FW_CLOUD,
    interconnect: bool = False,
) -> policy.FirmwareDecision:
    if functions is None:
        functions = [pf(int(f.address[6])) for f in firmware]
    return policy.firmware_decision(
        fw_policy, virt, physical, firmware, functions, payload, multi_host_interconnect=interconnect
    )


def test_policy_never_skips_without_looking() -> None:
    d = decide([fw(1, "garbage")], physical=False, fw_policy=FW_NEVER)
    assert d.outcome is FirmwareOutcome.SKIP
    assert "Never" in d.reason


def test_upgrades_every_older_pf_with_the_non_virt_image() -> None:
    d = decide([fw(2, "1.12.1.0"), fw(1, "1.12.0.0")])
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.image is FirmwareImage.NON_VIRT
    assert d.targets == ("0000:01:00.0", "0000:02:00.0")


def test_virt_image_when_fw_enable_virt_and_already_virt() -> None:
    d = decide([fw(1, "1.12.0.0", virt=True)], virt=True)
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.image is FirmwareImage.VIRT


def test_virt_to_non_virt_is_allowed() -> None:
    d = decide([fw(1, "1.13.0.0", virt=True)], payload="1.13.0.0", virt=False)
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.image is FirmwareImage.NON_VIRT


def test_refuses_on_a_virtual_machine() -> None:
    d = decide([fw(1, "1.12.0.0")], physical=False)
    assert d.outcome is FirmwareOutcome.REFUSE
    assert "physical machine" in d.reason
    assert d.targets == ()


def test_refuses_on_a_vf_only_node() -> None:
    d = decide([], functions=[vf(1), vf(1, 2)])
    assert d.outcome is FirmwareOutcome.REFUSE
    assert "only virtual functions" in d.reason


def test_vfs_are_never_targets() -> None:
    d = decide([fw(1, "1.12.0.0")], functions=[pf(1), vf(1), vf(1, 2)])
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.targets == ("0000:01:00.0",)


def test_no_gpu_is_nothing_to_do() -> None:
    assert decide([], functions=[]).outcome is FirmwareOutcome.SKIP


def test_straddling_1_12_refuses_and_names_the_gpus_on_each_side() -> None:
    d = decide([fw(1, "1.11.9.9"), fw(2, "1.12.0.0"), fw(3, "1.10.0.0")])
    assert d.outcome is FirmwareOutcome.REFUSE
    below, above = d.reason.split("at or above it")
    assert "0000:01:00.0 (1.11.9.9)" in below and "0000:03:00.0 (1.10.0.0)" in below
    assert "0000:02:00.0 (1.12.0.0)" in above
    assert "0000:02:00.0" not in below


def test_all_below_1_12_is_allowed() -> None:
    assert decide([fw(1, "1.10.0.0"), fw(2, "1.11.3.1")]).outcome is FirmwareOutcome.UPGRADE


def test_non_virt_to_virt_refuses_with_the_manual_confirmation_reason() -> None:
    d = decide([fw(1, "1.12.0.0", virt=True), fw(2, "1.12.0.0", virt=False)], virt=True)
    assert d.outcome is FirmwareOutcome.REFUSE
    assert "0000:02:00.0" in d.reason
    assert "0000:01:00.0" not in d.reason
    assert "manual confirmation" in d.reason and "server model" in d.reason


def test_non_virt_to_virt_refuses_even_at_the_payload_version() -> None:
    d = decide([fw(1, "1.13.0.0", virt=False)], payload="1.13.0.0", virt=True)
    assert d.outcome is FirmwareOutcome.REFUSE


def test_gpus_at_the_payload_version_are_skipped() -> None:
    d = decide([fw(1, "1.13.0.0"), fw(2, "1.12.5.0")], payload="1.13.0.0")
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.targets == ("0000:02:00.0",)
    assert d.current == ("0000:01:00.0",)


def test_everything_current_is_a_skip() -> None:
    d = decide([fw(1, "1.13.0.0"), fw(2, "1.13")], payload="1.13.0.0")
    assert d.outcome is FirmwareOutcome.SKIP
    assert d.current == ("0000:01:00.0", "0000:02:00.0")


def test_newer_firmware_is_never_downgraded() -> None:
    d = decide([fw(1, "1.14.0.0"), fw(2, "1.12.0.0")], payload="1.13.0.0")
    assert d.outcome is FirmwareOutcome.UPGRADE
    assert d.targets == ("0000:02:00.0",)
    assert d.newer == ("0000:01:00.0",)
    assert "not downgraded" in d.reason


def test_version_comparison_is_numeric() -> None:
    d = decide([fw(1, "1.12.9.0")], payload="1.12.10.0")
    assert d.targets == ("0000:01:00.0",)


@pytest.mark.parametrize(
    ("payload", "match"), [(None, "does not say which firmware"), ("next", "'next' is not a version")]
)
def test_payload_without_a_usable_firmware_version_refuses(payload: str | None, match: str) -> None:
    d = decide([fw(1, "1.12.0.0")], payload=payload)
    assert d.outcome is FirmwareOutcome.REFUSE
    assert match in d.reason


def test_missing_or_bad_vbios_facts_refuse_naming_the_gpu() -> None:
    d = decide([fw(1, "1.12.0.0")], functions=[pf(1), pf(2)])
    assert d.outcome is FirmwareOutcome.REFUSE and "no VBIOS version reported for 0000:02:00.0" in d.reason
    d = decide([fw(1, "1.12.0.0"), fw(2, "N/A")])
    assert d.outcome is FirmwareOutcome.REFUSE and "0000:02:00.0 ('N/A')" in d.reason


def test_multi_host_interconnect_refuses() -> None:
    assert decide([fw(1, "1.12.0.0")], interconnect=True).outcome is FirmwareOutcome.REFUSE


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(10, 14), st.integers(0, 3), st.booleans()), min_size=1, max_size=6),
    st.integers(10, 14),
    st.booleans(),
)
def test_firmware_invariants(gpus: list[tuple[int, int, bool]], payload_minor: int, virt: bool) -> None:
    firmware = [fw(i + 1, f"1.{minor}.{patch}.0", flag) for i, (minor, patch, flag) in enumerate(gpus)]
    d = decide(firmware, payload=f"1.{payload_minor}.0.0", virt=virt)
    sides = {minor >= 12 for minor, _, _ in gpus}
    if len(sides) == 2 or (virt and not all(flag for _, _, flag in gpus)):
        assert d.outcome is FirmwareOutcome.REFUSE
        return
    # Every PF lands in exactly one bucket, the one its version and build call for.
    expected: dict[str, list[str]] = {"targets": [], "current": [], "newer": []}
    for info, (minor, patch, flag) in zip(firmware, gpus, strict=True):
        have, want = (minor, patch), (payload_minor, 0)
        bucket = "newer" if have > want else "current" if have == want and flag == virt else "targets"
        expected[bucket].append(info.address)
    assert list(d.targets) == expected["targets"]
    assert list(d.current) == expected["current"]
    assert list(d.newer) == expected["newer"]
    assert (d.outcome is FirmwareOutcome.UPGRADE) == bool(expected["targets"])


# --- no parameter changes while flashing ----------------------------------------------------------------


def test_firmware_fields_are_locked_while_flashing() -> None:
    old = spec.Driver(payload=spec.DriverPayload(version="2.18.0"))
    new = spec.Driver(payload=spec.DriverPayload(version="2.19.0"), fw_upgrade_policy=FW_CLOUD, fw_enable_virt=True)
    errors = policy.firmware_edit_errors(old, new, ["node-b", "node-a"])
    assert [e.path for e in errors] == ["driver.fwUpgradePolicy", "driver.fwEnableVirt", "driver.payload.version"]
    assert "nodes: node-a, node-b" in errors[0].message
    assert policy.firmware_params_locked(old, new, ["node-a"])


def test_nothing_is_locked_when_no_node_is_flashing_or_nothing_changed() -> None:
    old = spec.Driver(payload=spec.DriverPayload(version="2.18.0"))
    new = spec.Driver(payload=spec.DriverPayload(version="2.19.0"))
    assert policy.firmware_edit_errors(old, new, []) == []
    assert not policy.firmware_params_locked(old, new, set())
    unrelated = spec.Driver(payload=spec.DriverPayload(version="2.18.0"), deploy_policy=HOST)
    assert policy.firmware_edit_errors(old, unrelated, ["n1"]) == []


def test_node_need_reboot_event_constants() -> None:
    assert policy.NODE_NEED_REBOOT_REASON == "NodeNeedReboot"
    assert policy.NODE_NEED_REBOOT_MESSAGE == "firmware upgrade done, need reboot machine to take effect"
