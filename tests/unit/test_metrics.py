"""metax_core.metrics (C8, R-EXPORTER): the sample over time, who holds which GPU, what a scrape renders.

Aspects: a GPU that stops answering keeps its series with its last values and growing age, and is unavailable
only after ``fail_after`` readings (the core verdict machine, R-HEALTH), with the fault's words; a single bad
reading is forgotten, a fault clears after ``clear_after`` readings without it; a degraded GPU stays available
(``mx_gpu_state`` 1) with its severity and faults in the health families; a VF shows its PF's faults; a
sampling that fails as a whole is unknown: verdicts kept for the grace, then HealthUnknown (degraded), every
series kept and the sample's age grows; vfio-bound functions are available without telemetry; device IDs of
each resource (GPU, VF, vfio-gpu, sGPU share) attributed to their function, other vendors' devices ignored;
one series per holder; exported_* label keys; units (KB, mW).
"""

from __future__ import annotations

import attrs

from metax_core.health import verdict
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import FunctionKind, GpuHealth, GpuMetrics, PciAddress, PciFunction
from metax_core.metrics import attribution, exposition, names, telemetry

A = PciAddress("0000:03:00.0")
B = PciAddress("0000:83:00.0")
VF = PciAddress("0000:03:00.1")
OPTIONS = exposition.Options(hostname="node-1", version="0.1.0")


def function(address: PciAddress, driver: str = "metax", kind: FunctionKind = FunctionKind.PF) -> PciFunction:
    return PciFunction(address=address, vendor_id=0x9999, device_id=0x4000, kind=kind, driver=driver)


def metrics(address: PciAddress, index: int, util: float = 10.0) -> GpuMetrics:
    return GpuMetrics(
        address=address,
        index=index,
        name="MetaX C500",
        utilization_percent=util,
        temperature_celsius=40.0,
        power_milliwatts=57000.0,
        power_cap_milliwatts=350000.0,
        memory_used_bytes=1024 * 1024,
        memory_total_bytes=4 * 1024 * 1024,
    )


def reading(*gpus: telemetry.GpuReading) -> telemetry.Telemetry:
    return telemetry.Telemetry(gpus=gpus, driver_version="2.18.0", maca_version="2.32.0.6", bios_version="1.13.0.0")


def ok(address: PciAddress, index: int, util: float = 10.0) -> telemetry.GpuReading:
    return telemetry.GpuReading(function(address), GpuHealth(address), metrics(address, index, util))


def silent(address: PciAddress) -> telemetry.GpuReading:
    return telemetry.GpuReading(
        function(address),
        GpuHealth(address, (Fault(FaultKind.NOT_ANSWERING, "bound to the driver but not listed by mx-smi"),)),
        None,
    )


def hot(address: PciAddress, index: int) -> telemetry.GpuReading:
    """Answering, but too hot: the degraded fault Thermal, as `faults.reading_faults` gives it."""
    return telemetry.GpuReading(
        function(address),
        GpuHealth(address, (Fault(FaultKind.THERMAL, "hotspot 99 °C, limit 95 °C"),)),
        metrics(address, index),
    )


def states(sample: telemetry.Sample) -> dict[str, tuple[float, str | float]]:
    """``mx_gpu_state`` per function: (value, unavailable_reason)."""
    out = exposition.render(sample, {}, {}, OPTIONS, now=sample.sampled_at or 0.0)
    return {str(s["pci_address"]): (float(s["value"]), s["unavailable_reason"]) for s in series(out, names.GPU_STATE)}


def series(
    rendered: tuple[exposition.Series, ...], family: names.Family, exported: bool = False
) -> list[dict[str, str | float]]:
    keys = family.label_keys(exported)
    found = next(s for s in rendered if s.family == family)
    return [{**dict(zip(keys, values, strict=True)), "value": value} for values, value in found.samples]


def test_a_gpu_that_stops_answering_keeps_its_series_and_is_unavailable_after_fail_after_readings() -> None:
    first = telemetry.advance(telemetry.Sample(), reading(ok(A, 0, util=33), ok(B, 1)), at=100.0)
    second = telemetry.advance(first, reading(silent(A), ok(B, 1)), at=105.0)
    assert states(second)[A] == (1.0, "")  # one reading is not a verdict (fail_after 2)
    assert second.recheck  # a fault not in force yet: read again soon
    third = telemetry.advance(second, reading(silent(A), ok(B, 1)), at=106.0)
    out = exposition.render(third, {}, {}, OPTIONS, now=108.0)

    state = {s["pci_address"]: s for s in series(out, names.GPU_STATE)}
    assert state[A]["value"] == 0.0
    assert state[A]["unavailable_reason"] == "NotAnswering: bound to the driver but not listed by mx-smi"
    assert state[B]["value"] == 1.0 and state[B]["unavailable_reason"] == ""
    assert {s["pci_address"]: s["value"] for s in series(out, names.HEALTH_SEVERITY)} == {A: 2.0, B: 0.0}
    assert [(s["pci_address"], s["fault"], s["severity"], s["value"]) for s in series(out, names.HEALTH_FAULT)] == [
        (A, "NotAnswering", "unusable", 1.0)
    ]
    usage = {s["pci_address"]: s["value"] for s in series(out, names.GPU_USAGE)}
    assert usage == {A: 33.0, B: 10.0}  # A keeps its last value
    age = {s["pci_address"]: s["value"] for s in series(out, names.GPU_SAMPLE_AGE)}
    assert age == {A: 8.0, B: 2.0}
    assert series(out, names.SAMPLE_AGE) == [{"value": 2.0}]


def test_a_single_bad_reading_is_forgotten_and_a_fault_clears_after_clear_after_readings() -> None:
    sample = telemetry.advance(telemetry.Sample(), reading(ok(A, 0)), at=1.0)
    sample = telemetry.advance(sample, reading(silent(A)), at=2.0)
    sample = telemetry.advance(sample, reading(ok(A, 0)), at=3.0)
    sample = telemetry.advance(sample, reading(silent(A)), at=4.0)
    assert states(sample)[A] == (1.0, "") and sample.recheck  # never two in a row: not in force
    sample = telemetry.advance(sample, reading(silent(A)), at=5.0)
    assert states(sample)[A][0] == 0.0
    sample = telemetry.advance(sample, reading(ok(A, 0)), at=6.0)
    assert states(sample)[A][0] == 0.0  # one good reading does not clear it (clear_after 2)
    sample = telemetry.advance(sample, reading(ok(A, 0)), at=7.0)
    assert states(sample)[A] == (1.0, "")
    assert sample.gpus[0].verdict.fine


def test_a_degraded_gpu_stays_available_and_shows_its_severity_and_fault() -> None:
    sample = telemetry.advance(telemetry.Sample(), reading(hot(A, 0), ok(B, 1)), at=1.0)
    sample = telemetry.advance(sample, reading(hot(A, 0), ok(B, 1)), at=2.0)
    out = exposition.render(sample, {}, {}, OPTIONS, now=2.0)
    assert {s["pci_address"]: (s["value"], s["unavailable_reason"]) for s in series(out, names.GPU_STATE)} == {
        A: (1.0, ""),
        B: (1.0, ""),
    }
    assert {s["pci_address"]: s["value"] for s in series(out, names.HEALTH_SEVERITY)} == {A: 1.0, B: 0.0}
    assert [(s["pci_address"], s["fault"], s["severity"]) for s in series(out, names.HEALTH_FAULT)] == [
        (A, "Thermal", "degraded")
    ]


def test_a_vf_shows_its_pfs_faults_as_gpu_device_does() -> None:
    vf = telemetry.GpuReading(attrs.evolve(function(VF, kind=FunctionKind.VF), physfn=A), GpuHealth(VF), metrics(VF, 2))
    sample = telemetry.Sample()
    for at in (1.0, 2.0):
        sample = telemetry.advance(sample, reading(silent(A), vf), at=at)
    gpus = {g.function.address: g for g in sample.gpus}
    assert gpus[VF].verdict == verdict.verdicts(sample.board, [gpus[A].function, gpus[VF].function])[VF]
    assert not gpus[VF].available and gpus[VF].reason.startswith(f"NotAnswering: its PF {A}: ")


def test_a_failed_sampling_is_unknown_verdicts_kept_for_the_grace_then_health_unknown() -> None:
    rules = verdict.Rules(unknown_grace=30.0)
    first = telemetry.advance(telemetry.Sample(), reading(silent(A), ok(B, 1)), at=90.0, rules=rules)
    first = telemetry.advance(first, reading(silent(A), ok(B, 1)), at=100.0, rules=rules)
    within = telemetry.failed(telemetry.failed(first, 105.0, rules), 125.0, rules, failure="mx-smi timed out")
    assert states(within) == {A: (0.0, "NotAnswering: bound to the driver but not listed by mx-smi"), B: (1.0, "")}
    after = telemetry.failed(within, 131.0, rules, failure="mx-smi timed out")
    out = exposition.render(after, {}, {}, OPTIONS, now=131.0)
    assert {s["pci_address"]: s["value"] for s in series(out, names.GPU_STATE)} == {A: 0.0, B: 1.0}
    assert {s["pci_address"]: s["value"] for s in series(out, names.HEALTH_SEVERITY)} == {A: 2.0, B: 1.0}
    assert sorted((s["pci_address"], s["fault"], s["severity"]) for s in series(out, names.HEALTH_FAULT)) == [
        (A, "HealthUnknown", "degraded"),
        (A, "NotAnswering", "unusable"),
        (B, "HealthUnknown", "degraded"),
    ]
    [unknown] = after.gpus[1].verdict.faults
    assert unknown.detail == "no health reading for 31 s: mx-smi timed out"
    assert series(out, names.SAMPLE_AGE) == [{"value": 31.0}]
    assert len(series(out, names.GPU_USAGE)) == 1  # B's last telemetry kept (A never answered)
    back = telemetry.advance(after, reading(silent(A), ok(B, 1)), at=132.0, rules=rules)
    assert [g.verdict.severity for g in back.gpus] == [2, 0]  # a reading that answers removes HealthUnknown at once


def test_a_gpu_removed_from_the_bus_is_dropped_and_a_vfio_gpu_is_available_without_telemetry() -> None:
    first = telemetry.advance(telemetry.Sample(), reading(ok(A, 0), ok(B, 1)), at=1.0)
    vfio = telemetry.GpuReading(function(B, driver="vfio-pci"), GpuHealth(B, note="bound to vfio-pci"), None)
    out = exposition.render(telemetry.advance(first, reading(vfio), at=2.0), {}, {}, OPTIONS, now=2.0)
    assert [(s["pci_address"], s["value"]) for s in series(out, names.GPU_STATE)] == [(B, 1.0)]


def test_units_are_mx_exporters_kb_and_milliwatts_and_info_metrics_carry_versions() -> None:
    out = exposition.render(telemetry.advance(telemetry.Sample(), reading(ok(A, 0)), at=1.0), {}, {}, OPTIONS, now=1.0)
    [total] = series(out, names.MEMORY_TOTAL)
    [used] = series(out, names.MEMORY_USED)
    [usage] = series(out, names.MEMORY_USAGE)
    assert (total["type"], total["value"], used["value"], usage["value"]) == ("vram", 4096.0, 1024.0, 25.0)
    assert series(out, names.BOARD_POWER)[0]["value"] == 57000.0
    [gpu] = series(out, names.GPU_USAGE)
    assert (gpu["deviceId"], gpu["modelName"], gpu["Hostname"], gpu["driver_version"]) == (
        "0",
        "MetaX C500",
        "node-1",
        "2.18.0",
    )
    assert series(out, names.DRIVER_INFO) == [
        {"Hostname": "node-1", "driver_version": "2.18.0", "maca_version": "2.32.0.6", "value": 1.0}
    ]
    assert series(out, names.BUILD_INFO) == [{"version": "0.1.0", "value": 1.0}]


def test_xtt_memory_and_the_uuid_are_served_when_the_reading_has_them() -> None:
    """libmxsml reports xtt memory and a UUID (metax_hw/mxsml.py); mx-smi's summary does not: no xtt series then."""
    m = attrs.evolve(metrics(A, 0), xtt_used_bytes=3 * 1024 * 1024, xtt_total_bytes=12 * 1024 * 1024, uuid="GPU-1234")
    with_xtt = telemetry.GpuReading(function(A), GpuHealth(A), m)
    out = exposition.render(
        telemetry.advance(telemetry.Sample(), reading(with_xtt, ok(B, 1)), at=1.0), {}, {}, OPTIONS, 1.0
    )
    total = {(s["pci_address"], s["type"]): s["value"] for s in series(out, names.MEMORY_TOTAL)}
    assert total == {(A, "vram"): 4096.0, (A, "xtt"): 12288.0, (B, "vram"): 4096.0}
    usage = {(s["pci_address"], s["type"]): s["value"] for s in series(out, names.MEMORY_USAGE)}
    assert usage[(A, "xtt")] == 25.0
    assert {s["pci_address"]: s["uuid"] for s in series(out, names.GPU_USAGE)} == {A: "GPU-1234", B: ""}


def test_collector_stats_are_counted_per_collector() -> None:
    stats = {names.Collector.TELEMETRY: exposition.CollectorStats(duration=0.25, ok=False, errors=3)}
    out = exposition.render(telemetry.Sample(), {}, stats, OPTIONS, now=0.0)
    errors = {s["collector"]: s["value"] for s in series(out, names.COLLECTION_ERRORS)}
    assert errors == {"telemetry": 3.0, "pod_resources": 0.0}
    assert series(out, names.COLLECTOR_SUCCESS) == [{"collector": "telemetry", "value": 0.0}]
    assert series(out, names.SAMPLE_AGE) == []  # no sample yet: no age to report


def holder(pod: str) -> attribution.Holder:
    return attribution.Holder("team-a", pod, "main")


def test_device_ids_of_every_resource_name_their_function_and_foreign_devices_are_ignored() -> None:
    held = attribution.holdings(
        [
            attribution.HeldDevices(holder("whole"), "metax-tech.com/gpu", (A,)),
            attribution.HeldDevices(holder("vf"), "metax-tech.com/gpu", (VF,)),
            attribution.HeldDevices(holder("vm"), "metax-tech.com/vfio-gpu", ("0000:84:00.0",)),
            attribution.HeldDevices(holder("shares"), "metax-tech.com/sgpu", (f"{B}-00", f"{B}-03")),
            attribution.HeldDevices(holder("other"), "metax-tech.com/sgpu", (f"{B}-01",)),
            attribution.HeldDevices(holder("nvidia"), "nvidia.com/gpu", ("GPU-1234",)),
        ]
    )
    assert held == {
        A: (attribution.Holding(holder("whole"), "metax-tech.com/gpu", 1),),
        VF: (attribution.Holding(holder("vf"), "metax-tech.com/gpu", 1),),
        B: (
            attribution.Holding(holder("other"), "metax-tech.com/sgpu", 1),
            attribution.Holding(holder("shares"), "metax-tech.com/sgpu", 2),
        ),
        PciAddress("0000:84:00.0"): (attribution.Holding(holder("vm"), "metax-tech.com/vfio-gpu", 1),),
    }


def test_a_shared_gpu_has_one_series_per_holder_and_exported_label_keys_on_request() -> None:
    sample = telemetry.advance(telemetry.Sample(), reading(ok(A, 0), ok(B, 1)), at=1.0)
    held = attribution.holdings(
        [
            attribution.HeldDevices(holder("p1"), "metax-tech.com/sgpu", (f"{B}-00",)),
            attribution.HeldDevices(holder("p2"), "metax-tech.com/sgpu", (f"{B}-01", f"{B}-02")),
        ]
    )
    options = exposition.Options(hostname="node-1", exported_pod_labels=True)
    out = exposition.render(sample, held, {}, options, now=1.0)
    usage = series(out, names.GPU_USAGE, exported=True)
    assert [(s["pci_address"], s["exported_namespace"], s["exported_pod"]) for s in usage] == [
        (A, "", ""),
        (B, "team-a", "p1"),
        (B, "team-a", "p2"),
    ]
    assert "pod" not in usage[0]
    holders = series(out, names.GPU_HOLDERS, exported=True)
    assert [(s["exported_pod"], s["resource"], s["value"]) for s in holders] == [
        ("p1", "metax-tech.com/sgpu", 1.0),
        ("p2", "metax-tech.com/sgpu", 2.0),
    ]


def test_every_family_is_rendered_with_label_values_matching_its_keys() -> None:
    sample = telemetry.advance(telemetry.Sample(), reading(ok(A, 0)), at=1.0)
    out = exposition.render(sample, {}, {}, OPTIONS, now=1.0)
    assert [s.family for s in out] == list(names.ALL)
    for s in out:
        for values, _ in s.samples:
            assert len(values) == len(s.family.label_keys())
    assert len({f.name for f in names.ALL}) == len(names.ALL)
    assert all(f.name.startswith(("mx_", "metax_gpu_health_", "metax_exporter_")) for f in names.ALL)


def test_docs_exporter_md_names_every_family_and_every_one_not_served() -> None:
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "exporter.md").read_text()
    for family in names.ALL:
        assert f"`{names.exposed_name(family)}`" in text or f"`{family.name}`" in text, family.name
    for name in names.NOT_FROM_MX_SMI:
        assert f"`{name}`" in text, name
