"""The health report on the Node (the agents write it, the operator and doctor read it), the condition the
operator derives from it and the Events an agent emits (R-HEALTH)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.health import report, verdict
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import PciAddress
from metax_core.wire import event_reasons

A, B = PciAddress("0000:09:00.0"), PciAddress("0000:0a:00.0")

faults_st = st.lists(
    st.builds(Fault, st.sampled_from(list(FaultKind)), st.text(max_size=40)), min_size=1, max_size=3, unique=True
)
entries = st.builds(
    report.GpuEntry,
    st.from_regex(r"0000:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]", fullmatch=True).map(PciAddress),
    faults_st.map(lambda f: tuple(sorted(f))),
    st.one_of(st.none(), st.integers(0, 4_000_000_000).map(lambda s: dt.datetime.fromtimestamp(s, dt.UTC))),
    st.lists(st.from_regex(r"[a-z]{1,8}/[a-z0-9-]{1,12}", fullmatch=True), max_size=3, unique=True).map(
        lambda h: tuple(sorted(h))
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=4), st.integers(0, 64), st.sampled_from(["gpu-device", "dra-driver"]))
def test_what_the_agent_encodes_the_operator_decodes(gpus: list[report.GpuEntry], judged: int, agent: str) -> None:
    written = report.Report(tuple(gpus), judged, agent)
    assert report.decode(report.encode(written)) == written


def test_the_report_of_verdicts_lists_only_gpus_that_are_not_fine_with_their_holders() -> None:
    sick = verdict.Verdict((Fault(FaultKind.FELL_OFF_BUS, "0xffff"),), since=1_800_000_000.7)
    made = report.of({A: sick, B: verdict.FINE}, {A: ["ml/train-0", "ml/train-0", "a/b"], B: ["x/y"]}, "gpu-device")
    assert made.judged == 2 and made.agent == "gpu-device"
    (entry,) = made.gpus
    assert entry.address == A and entry.holders == ("a/b", "ml/train-0")
    assert entry.since == dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC)
    assert report.encode(made) == report.encode(made) and '"severity":"unusable"' in report.encode(made)
    assert report.decode(report.encode(made)).unusable() == (entry,)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{", "not JSON"),
        ("[]", "the value must be a dict"),
        ('{"gpus": {}}', "gpus must be a list"),
        ('{"gpus": [{"address": "x", "faults": []}]}', "gpus[0].faults must name at least one fault"),
        ('{"gpus": [{"address": "x", "faults": [{"kind": "Ecc"}]}]}', "gpus[0].faults[0].kind: fault kind 'Ecc'"),
        ('{"gpus": [{"address": 3, "faults": [{"kind": "Thermal"}]}]}', "gpus[0].address must be a str"),
        ('{"gpus": [{"address": "x", "faults": [{"kind": "Thermal"}], "since": "now"}]}', "gpus[0].since must be"),
        ('{"judged": true}', "judged must be a int"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field(text: str, named: str) -> None:
    with pytest.raises(InvalidSpec, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        report.decode(text)


def test_the_condition_says_the_worst_and_names_every_gpu() -> None:
    healthy = report.condition(report.Report((), judged=8))
    assert (healthy.status, healthy.reason) == ("True", report.HEALTHY_REASON) and "all 8" in healthy.message
    hot = report.GpuEntry(A, (Fault(FaultKind.THERMAL, "hotspot 97 °C"),))
    gone = report.GpuEntry(B, (Fault(FaultKind.FELL_OFF_BUS, "0xffff"),))
    both = report.condition(report.Report((hot, gone), judged=8))
    assert (both.status, both.reason) == ("False", "GPUUnusable")
    assert both.message == f"{A} degraded (Thermal: hotspot 97 °C); {B} unusable (FellOffBus: 0xffff)"
    assert report.condition(report.Report((hot,), judged=8)).reason == "GPUDegraded"
    unknown = report.GpuEntry(A, (Fault(FaultKind.HEALTH_UNKNOWN, "no reading"),))
    assert report.condition(report.Report((unknown,), judged=8)).reason == report.UNKNOWN_REASON


def test_news_is_a_warning_when_worse_and_normal_when_recovered() -> None:
    gone = verdict.Verdict((Fault(FaultKind.FELL_OFF_BUS, "0xffff"),))
    hot = verdict.Verdict((Fault(FaultKind.THERMAL, "97 °C"),))
    bad = report.news(A, verdict.FINE, gone)
    assert (bad.reason, bad.warning) == (event_reasons.GPU_UNUSABLE, True) and "FellOffBus: 0xffff" in bad.message
    assert report.news(A, verdict.FINE, hot).reason == event_reasons.GPU_DEGRADED
    back = report.news(A, gone, verdict.FINE)
    assert (back.reason, back.warning) == (event_reasons.GPU_RECOVERED, False) and "was: FellOffBus" in back.message


def test_the_condition_is_written_only_when_it_changes_and_its_transition_moves_with_its_status() -> None:
    hot = report.Report((report.GpuEntry(A, (Fault(FaultKind.THERMAL, "97 °C"),)),), judged=2)
    first = report.condition_to_apply(hot, None, "2026-12-07T10:00:00Z")
    assert first is not None and first["status"] == "False" and first["lastTransitionTime"] == "2026-12-07T10:00:00Z"
    assert report.condition_to_apply(hot, first, "2026-12-07T10:05:00Z") is None
    gone = report.Report((report.GpuEntry(A, (Fault(FaultKind.FELL_OFF_BUS, "0xffff"),)),), judged=2)
    worse = report.condition_to_apply(gone, first, "2026-12-07T10:06:00Z")
    assert worse is not None and worse["reason"] == "GPUUnusable"
    assert worse["lastTransitionTime"] == "2026-12-07T10:00:00Z", "still False: the transition stays"
    back = report.condition_to_apply(report.Report((), judged=2), worse, "2026-12-07T10:07:00Z")
    assert back is not None and (back["status"], back["lastTransitionTime"]) == ("True", "2026-12-07T10:07:00Z")
    assert report.node_condition({"status": {"conditions": [back, {"type": "Ready"}]}}) == back
