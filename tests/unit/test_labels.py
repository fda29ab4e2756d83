"""Node labels and annotations from a node inventory (R-LABELS, §3.3.2; HAMi's node-gpu-devices).

Covered: label value sanitising (property: always valid, idempotent on valid input); the §3.3.2 selector
labels (gpu.product C500, gpu.vfnum "0"); every owned key present with None for removal; no key outside our
prefix and never the admin-owned ones; product fallback to the reported name; VF-only nodes; driver and
MACA versions; the HAMi annotation's fields, link zones and vfio exclusion; admin label parsing.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import (
    DriverVersion,
    FunctionKind,
    GpuHealth,
    GpuLink,
    GpuMetrics,
    LinkKind,
    ModuleState,
    PciAddress,
    PciFunction,
)
from metax_core.node import devices, labels

K8S_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
GIB = 1 << 30


def addr(n: int, fn: int = 0) -> PciAddress:
    return PciAddress(f"0000:{n:02x}:00.{fn}")


def pf(
    n: int, *, device_id: int = 0x4000, numvfs: int = 0, totalvfs: int = 0, numa: int | None = 0, driver: str = "metax"
) -> PciFunction:
    return PciFunction(
        address=addr(n),
        vendor_id=0x9999,
        device_id=device_id,
        numa_node=numa,
        sriov_numvfs=numvfs,
        sriov_totalvfs=totalvfs,
        driver=driver,
    )


def vf(n: int, fn: int, *, driver: str = "metax") -> PciFunction:
    return PciFunction(
        address=addr(n, fn),
        vendor_id=0x9999,
        device_id=0x4001,
        kind=FunctionKind.VF,
        physfn=addr(n),
        driver=driver,
        numa_node=1,
    )


def metric(n: int, *, name: str = "MetaX C500", memory: int | None = 64 * GIB, fn: int = 0) -> GpuMetrics:
    return GpuMetrics(address=addr(n, fn), index=n, name=name, memory_total_bytes=memory)


def inventory(**kw: object) -> labels.NodeInventory:
    defaults: dict[str, object] = {
        "node_name": "sample-node1",
        "functions": (pf(1), pf(2)),
        "metrics": (metric(1), metric(2)),
        "health": {addr(1): GpuHealth(addr(1)), addr(2): GpuHealth(addr(2), (Fault(FaultKind.STATE, "ecc"),))},
        "module": ModuleState(name="metax", version=DriverVersion("2.32.0")),
    }
    defaults.update(kw)
    return labels.NodeInventory(**defaults)  # type: ignore[arg-type]


# --- sanitize_label_value -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_sanitized_values_are_always_valid_label_values(text: str) -> None:
    value = labels.sanitize_label_value(text)
    assert 1 <= len(value) <= 63
    assert K8S_LABEL_VALUE.match(value)
    assert labels.is_valid_label_value(value)


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"))
def test_valid_values_pass_through_unchanged(text: str) -> None:
    assert labels.sanitize_label_value(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MetaX C500", "MetaX-C500"),
        ("  C500 (64GB)  ", "C500-64GB"),
        ("曦云C500", "C500"),
        ("Ｃ５００", "C500"),
        ("---", "unknown"),
        ("", "unknown"),
        ("a" * 62 + "-b", "a" * 62),
        ("x" * 100, "x" * 63),
    ],
)
def test_sanitize_examples(text: str, expected: str) -> None:
    assert labels.sanitize_label_value(text) == expected


def test_sanitize_refuses_an_invalid_fallback() -> None:
    with pytest.raises(ValueError, match="fallback '-' is not a valid label value"):
        labels.sanitize_label_value("", fallback="-")


# --- node_labels ----------------------------------------------------------------------------------------


def test_labels_of_a_c500_node() -> None:
    result = labels.node_labels(inventory())
    assert result == {
        labels.GPU_INSTALLED: "true",
        labels.GPU_PRODUCT: "C500",
        labels.GPU_FAMILY: "xiyun",
        labels.GPU_COUNT: "2",
        labels.GPU_MEMORY: "65536",
        labels.GPU_VFNUM: "0",
        labels.GPU_SRIOV: "false",
        labels.GPU_DRIVER_MAJOR: "2",
        labels.GPU_DRIVER_MINOR: "32",
        labels.GPU_DRIVER_PATCH: "0",
    }


def test_the_3_3_2_node_selector_matches() -> None:
    selector = {"metax-tech.com/gpu.vfnum": "0", "metax-tech.com/gpu.product": "C500"}
    result = labels.node_labels(inventory())
    assert all(result[k] == v for k, v in selector.items())


def test_a_node_without_gpus_removes_every_label() -> None:
    result = labels.node_labels(inventory(functions=(), metrics=()))
    assert result == dict.fromkeys(labels.OWNED_LABELS)


def test_stale_driver_labels_are_removed_when_the_module_is_unloaded() -> None:
    result = labels.node_labels(inventory(module=None))
    for key in (labels.GPU_DRIVER_MAJOR, labels.GPU_DRIVER_MINOR, labels.GPU_DRIVER_PATCH):
        assert key in result and result[key] is None


def test_a_two_part_driver_version_removes_the_patch_label() -> None:
    result = labels.node_labels(inventory(module=ModuleState(name="metax", version=DriverVersion("3.1"))))
    assert (result[labels.GPU_DRIVER_MAJOR], result[labels.GPU_DRIVER_MINOR], result[labels.GPU_DRIVER_PATCH]) == (
        "3",
        "1",
        None,
    )


def test_vfnum_and_sriov_follow_the_pfs() -> None:
    fns = (pf(1, numvfs=4, totalvfs=8), pf(2, numvfs=4, totalvfs=8), vf(1, 1), vf(2, 1))
    result = labels.node_labels(inventory(functions=fns))
    assert (result[labels.GPU_VFNUM], result[labels.GPU_SRIOV], result[labels.GPU_COUNT]) == ("4", "true", "2")


def test_vfnum_is_removed_while_pfs_disagree() -> None:
    fns = (pf(1, numvfs=4, totalvfs=8), pf(2, numvfs=0, totalvfs=8))
    assert labels.node_labels(inventory(functions=fns))[labels.GPU_VFNUM] is None


def test_unknown_device_uses_the_reported_name_without_the_vendor() -> None:
    fns = (pf(1, device_id=0x4ABC),)
    result = labels.node_labels(inventory(functions=fns, metrics=(metric(1, name="MetaX N260 (PCIe)"),)))
    assert result[labels.GPU_PRODUCT] == "N260-PCIe"
    assert result[labels.GPU_FAMILY] == "xisi"


def test_unknown_device_without_a_name_uses_the_device_id() -> None:
    result = labels.node_labels(inventory(functions=(pf(1, device_id=0x4ABC),), metrics=()))
    assert result[labels.GPU_PRODUCT] == "device-4abc"
    assert result[labels.GPU_FAMILY] is None
    assert result[labels.GPU_MEMORY] is None


def test_memory_is_the_smallest_gpu_in_mib() -> None:
    result = labels.node_labels(inventory(metrics=(metric(1, memory=64 * GIB), metric(2, memory=32 * GIB))))
    assert result[labels.GPU_MEMORY] == "32768"


def test_a_vm_seeing_only_vfs_counts_them_but_claims_no_vfnum() -> None:
    result = labels.node_labels(inventory(functions=(vf(1, 1), vf(1, 2)), metrics=()))
    assert result[labels.GPU_COUNT] == "2"
    assert result[labels.GPU_PRODUCT] == "device-4001"
    assert result[labels.GPU_VFNUM] is None and result[labels.GPU_SRIOV] is None


gpu_functions = st.lists(
    st.builds(
        lambda n, dev, numvfs, total: pf(n, device_id=dev, numvfs=min(numvfs, total), totalvfs=total),
        st.integers(0, 255),
        st.sampled_from([0x4000, 0x4001, 0x4ABC]),
        st.integers(0, 8),
        st.integers(0, 8),
    ),
    max_size=4,
    unique_by=lambda f: f.address,
)


@settings(max_examples=80, deadline=None)
@given(
    functions=gpu_functions,
    name=st.text(max_size=40),
    driver=st.one_of(st.none(), st.text(max_size=12)),
    maca=st.lists(st.text(max_size=12), max_size=3),
)
def test_labels_property(functions: list[PciFunction], name: str, driver: str | None, maca: list[str]) -> None:
    maca_label, _ = labels.maca_metadata(maca)
    assert all(v is None or labels.is_valid_label_value(v) for v in maca_label.values())
    inv = labels.NodeInventory(
        node_name="n",
        functions=tuple(functions),
        metrics=tuple(GpuMetrics(address=f.address, index=0, name=name) for f in functions),
        module=None if driver is None else ModuleState(name="metax", version=DriverVersion(driver)),
    )
    result = labels.node_labels(inv)
    assert set(result) == set(labels.OWNED_LABELS)
    assert all(k.startswith(labels.PREFIX) for k in result)
    assert labels.GPU_DEVICE_MODE not in result and labels.GPU_DEVICE_QOS_POLICY not in result
    for value in result.values():
        assert value is None or labels.is_valid_label_value(value)
    assert (result[labels.GPU_INSTALLED] == "true") == bool(functions)


# --- annotations ----------------------------------------------------------------------------------------


def test_hami_annotation_fields() -> None:
    links = (GpuLink(addr(1), addr(2), LinkKind.MX),)
    inv = inventory(uuids={addr(1): "GPU-aaaa"}, links=links)
    annotations = labels.node_annotations(inv, sgpu_shares=16, qos_policy=devices.QosPolicy.FIXED_SHARE)
    entries = json.loads(annotations[labels.NODE_GPU_DEVICES] or "")
    assert entries[0] == {
        "uuid": "GPU-aaaa",
        "bdf": "0000:01:00.0",
        "model": "C500",
        "totalDevCount": 16,
        "totalCompute": 100,
        "totalVRam": 65536,
        "numa": 0,
        "healthy": True,
        "qosPolicy": "fixed-share",
        "linkZone": 1,
    }
    assert entries[1]["uuid"] == labels.device_uuid("sample-node1", addr(2))
    assert (entries[1]["healthy"], entries[1]["linkZone"]) == (False, 1)


def test_maca_metadata_newest_label_and_all_in_the_annotation() -> None:
    label, annotation = labels.maca_metadata(("maca-2.18.0.3", "2.9.1", "maca-2.18.0.10"), ready=True)
    assert label == {labels.GPU_MACA_VERSION: "2.18.0.10", labels.MACA_READY: labels.TRUE}
    assert annotation == {labels.MACA_VERSIONS: "2.18.0.10,2.18.0.3,2.9.1"}
    empty = ({labels.GPU_MACA_VERSION: None, labels.MACA_READY: None}, {labels.MACA_VERSIONS: None})
    assert labels.maca_metadata(()) == empty
    assert labels.GPU_MACA_VERSION not in labels.OWNED_LABELS  # maca's, not gpu-label's (it would remove it)


def test_derived_uuids_are_stable_and_distinct() -> None:
    a = labels.device_uuid("n1", addr(1))
    assert a == labels.device_uuid("n1", addr(1))
    assert len({a, labels.device_uuid("n2", addr(1)), labels.device_uuid("n1", addr(2))}) == 3
    assert labels.device_uuid("n1", addr(1), " GPU-x ") == "GPU-x"


def test_hami_lists_what_gpu_device_shares() -> None:
    # PF 1 has VFs: its metax-bound VF is shared, the vfio-bound one and the PF are not; PF 2 has no VFs.
    fns = (pf(1, numvfs=2, totalvfs=8), vf(1, 1), vf(1, 2, driver="vfio-pci"), pf(2), pf(3, driver="vfio-pci"))
    metrics = (metric(1, fn=1, memory=32 * GIB), metric(2))
    inv = inventory(
        functions=fns, metrics=metrics, health={addr(2): GpuHealth(addr(2), (Fault(FaultKind.STATE, "ecc"),))}
    )
    entries = json.loads(labels.node_annotations(inv)[labels.NODE_GPU_DEVICES] or "")
    assert [d["bdf"] for d in entries] == ["0000:01:00.1", "0000:02:00.0"]
    assert [e["bdf"] for e in entries] == [f.address for f in labels.shareable(fns)]
    assert (entries[0]["totalVRam"], entries[0]["numa"]) == (32768, 1)
    assert entries[0]["healthy"] is True  # no report: healthy, as gpu-device counts it
    assert entries[1]["healthy"] is False
    assert entries[0]["qosPolicy"] == "best-effort"
    assert entries[0]["totalDevCount"] == devices.DEFAULT_SHARES


def test_annotations_are_removed_when_nothing_is_left() -> None:
    inv = inventory(functions=(pf(1, driver="vfio-pci"),))
    assert labels.node_annotations(inv) == {labels.NODE_GPU_DEVICES: None}


def test_link_zones() -> None:
    a = [addr(n) for n in range(1, 7)]
    links = [
        GpuLink(a[3], a[4], LinkKind.MX),
        GpuLink(a[0], a[1], LinkKind.MX),
        GpuLink(a[4], a[5], LinkKind.MX),  # 4-5-6 through 5
        GpuLink(a[1], a[2], LinkKind.PIX),  # not MetaXLink
        GpuLink(a[0], PciAddress("0000:ff:00.0"), LinkKind.MX),  # not listed
    ]
    assert labels.link_zones(a, links) == {a[0]: 1, a[1]: 1, a[2]: 0, a[3]: 2, a[4]: 2, a[5]: 2}


def test_numa_unknown_is_zero() -> None:
    inv = inventory(functions=(pf(1, numa=None),))
    assert json.loads(labels.node_annotations(inv)[labels.NODE_GPU_DEVICES] or "")[0]["numa"] == 0


def test_removal_covers_everything_owned() -> None:
    owned_labels, owned_annotations = labels.removal()
    assert owned_labels == dict.fromkeys(labels.OWNED_LABELS)
    assert owned_annotations == dict.fromkeys(labels.OWNED_ANNOTATIONS)


# --- admin-owned labels --------------------------------------------------------------------------------


def test_admin_labels_are_the_ones_gpu_device_reads() -> None:
    assert labels.GPU_DEVICE_MODE == devices.MODE_LABEL == "metax-tech.com/gpu-device.mode"
    assert labels.GPU_DEVICE_QOS_POLICY == devices.QOS_LABEL == "metax-tech.com/gpu-device.qos-policy"
    assert not set(labels.OWNED_LABELS) & {labels.GPU_DEVICE_MODE, labels.GPU_DEVICE_QOS_POLICY}
