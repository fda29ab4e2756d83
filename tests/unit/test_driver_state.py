"""driver-manager's memory between runs as a document (`metax_core.node.driver_state`):

- every field round-trips through `render` and `parse`, the previous driver included;
- a document that is not an object, or whose fields have the wrong types, reads as what can be trusted of it
  (the worst case is one extra reload or one repeated flash), and only text that is not JSON is an error;
- VF counts that are not positive integers are dropped from the previous driver (nothing to restore).
"""

from __future__ import annotations

import pytest

from metax_core.node import driver_plan, driver_state


def test_every_field_round_trips() -> None:
    state = driver_state.HostState(
        params={"sriov": "1"},
        flashed={"0000:03:00.0": "1.14.0.0"},
        version="2.18.0",
        module_file="/var/lib/metax/drivers/2.18.0/6.1.0-57-amd64/metax.ko",
        previous=driver_plan.RunningDriver("2.17.0", {"a": "b"}, None, {"0000:03:00.0": 4}),
    )
    assert driver_state.parse(driver_state.render(state)) == state
    assert driver_state.parse(driver_state.render(driver_state.HostState())) == driver_state.HostState()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[]", driver_state.HostState()),
        ('{"params": "x", "flashed": [1], "version": 3, "moduleFile": ""}', driver_state.HostState()),
        ('{"params": {"a": 1}}', driver_state.HostState(params={"a": "1"})),
        (
            '{"previous": {"version": "2.17.0", "vfCounts": {"0000:03:00.0": 0, "0000:04:00.0": "2", "x": 3}}}',
            driver_state.HostState(previous=driver_plan.RunningDriver("2.17.0", {}, None, {"x": 3})),
        ),
    ],
)
def test_odd_documents_read_as_what_can_be_trusted(text: str, expected: driver_state.HostState) -> None:
    assert driver_state.parse(text) == expected


def test_text_that_is_not_json_is_an_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        driver_state.parse("{not json")
