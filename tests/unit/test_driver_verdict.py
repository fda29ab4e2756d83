"""driver-manager's verdict annotation, the format both driver-manager and the operator call (issue 41 item 1;
R-ROLLOUT, R-DRIVER; `metax_core.wire.driver_verdict`). The writer-to-reader round trip through the real agent
and the operator's node cache is tests/services/agents/test_driver_verdict.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.wire import driver_verdict
from metax_core.wire.driver_verdict import Cause, Verdict

T = dt.datetime(2026, 12, 6, 23, 0, 5, 750_000, tzinfo=dt.UTC)


@given(
    cause=st.sampled_from(Cause),
    version=st.text(max_size=40),
    message=st.text(max_size=600),
    at=st.datetimes(min_value=dt.datetime(2000, 1, 1), timezones=st.just(dt.UTC)),
    pod=st.text(max_size=63),
)
def test_what_is_encoded_decodes_to_the_same_verdict(
    cause: Cause, version: str, message: str, at: dt.datetime, pod: str
) -> None:
    verdict = Verdict(cause, version, message, at, pod)
    assert driver_verdict.decode(driver_verdict.encode(verdict)) == verdict
    assert len(verdict.message) <= driver_verdict.MESSAGE_LIMIT


def test_the_moment_is_kept_to_the_second_in_utc() -> None:
    eastern = dt.timezone(dt.timedelta(hours=8))
    verdict = Verdict(Cause.LOAD_REFUSED, "2.21.0", "Invalid module format", T.astimezone(eastern))
    assert json.loads(driver_verdict.encode(verdict))["at"] == "2026-12-06T23:00:05Z"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("not json", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"cause":"LoadRefused","version":"1","message":"m"}', "driver.verdict.at: must be a string"),
        ('{"cause":"Gone","version":"1","message":"m","at":"2026-12-06T23:00:05Z"}', "LoadRefused, KernelNotCovered"),
        ('{"cause":"LoadRefused","version":2,"message":"m","at":"2026-12-06T23:00:05Z"}', ".version: must be a string"),
        ('{"cause":"LoadRefused","version":"1","message":"m","at":"yesterday"}', ".at: 'yesterday' is not an RFC"),
        ('{"cause":"LoadRefused","version":"1","message":"m","at":"2026-12-06T23:00:05"}', "has no time zone"),
        ('{"cause":"LoadRefused","version":"1","message":"m","at":"2026-12-06T23:00:05Z","pod":7}', ".pod: must be"),
    ],
)
def test_anything_else_is_refused_naming_the_field(text: str, names: str) -> None:
    with pytest.raises(ValueError, match=r"metax-tech.com/driver.verdict") as caught:
        driver_verdict.decode(text)
    assert names in str(caught.value)


def test_a_verdict_counts_only_for_the_pod_that_reached_it() -> None:
    """The refused canary's verdict must not fail the pod that replaces it, even one started in the same second."""
    verdict = Verdict(Cause.KERNEL_NOT_COVERED, "2.21.0", "no module for 6.1.0-57-amd64", T, "metax-driver-7xk2p")
    assert driver_verdict.applies_to(verdict, "metax-driver-7xk2p", T - dt.timedelta(seconds=30))
    assert not driver_verdict.applies_to(verdict, "metax-driver-q9w4z", T.replace(microsecond=0))


def test_a_verdict_without_its_pod_counts_for_a_pod_started_before_it() -> None:
    verdict = Verdict(Cause.KERNEL_NOT_COVERED, "2.21.0", "no module for 6.1.0-57-amd64", T)
    assert driver_verdict.applies_to(verdict, "any", T - dt.timedelta(seconds=30))
    assert driver_verdict.applies_to(verdict, "any", T.replace(microsecond=0))  # the same second: startTime's precision
    assert not driver_verdict.applies_to(verdict, "any", T + dt.timedelta(seconds=1))  # a later pod
    assert not driver_verdict.applies_to(verdict, "any", None)  # not started: it wrote none
