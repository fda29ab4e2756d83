"""The operator's settings from the environment: documented defaults, identity, and every bad variable named.

Aspects: an empty environment gives the documented defaults; METAX_IDENTITY wins over POD_NAME; bad values of
several variables are all reported at once, each by its variable; the minimums (resync >= 600 s) hold; an empty
variable means the default.
"""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from services.operator import settings


def test_defaults_and_identity() -> None:
    s = settings.from_env({"POD_NAME": "op-1"})
    assert (s.namespace, s.leader_election, s.resync_seconds, s.identity) == ("metax-operator", True, 600.0, "op-1")
    assert settings.from_env({"POD_NAME": "op-1", "METAX_IDENTITY": "me"}).identity == "me"
    assert settings.from_env({"METAX_RESYNC_SECONDS": ""}).resync_seconds == 600.0


def test_every_bad_variable_is_named_at_once() -> None:
    with pytest.raises(InvalidSpec) as caught:
        settings.from_env({"METAX_LEADER_ELECTION": "maybe", "METAX_DRIVER_READY_TIMEOUT": "soon"})
    paths = sorted(e.path for e in caught.value.errors)
    assert paths == ["METAX_DRIVER_READY_TIMEOUT", "METAX_LEADER_ELECTION"]


def test_a_resync_more_often_than_ten_minutes_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="METAX_RESYNC_SECONDS: must be at least 600 seconds, got '60'"):
        settings.from_env({"METAX_RESYNC_SECONDS": "60"})
    assert settings.from_env({"METAX_RESYNC_SECONDS": "900", "METAX_LEADER_ELECTION": "false"}).leader_election is False
