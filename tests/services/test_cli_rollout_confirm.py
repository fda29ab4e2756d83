"""`metax-operator rollout confirm` writes exactly what the waiting step's message says (R-ROLLOUT, issue 20).

The status is the machine's own (a §3.2.8 rollout played by `metax_core.rollout.sim` until step 1 waits), stored
on cluster-operator in an in-memory API server; the CLI reads it and patches. Aspects: the annotation the CLI
writes is the ``key=value`` of the message's ``kubectl annotate`` line; the ``--step N`` the message names is
accepted and another step is refused with nothing written; the machine, given that annotation, confirms the
step; with no waiting step the CLI says so.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from typing import Any

import pytest

from metax_core.rollout import machine, sim
from metax_core.rollout import status as rollout_status
from metax_core.rollout.status import ConditionType, Reason
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP
from metax_k8s import crd
from metax_k8s.inmemory import InMemoryApiServer
from services.cli import rollout as cli_rollout

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
POLICY = spec.UpgradePolicy(
    enable_rollout=True, upgrade_steps=(spec.UpgradeStep(IoP(2)), spec.UpgradeStep(IoP.of_percent(100)))
)
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


Waiting = tuple[rollout_status.UpgradeStatus, sim.SimFleet, dt.datetime]


def _waiting() -> Waiting:
    fleet = sim.SimFleet(sim.node_names(4), machine.Revision.OLD)
    status: rollout_status.UpgradeStatus | None = None
    now = NOW
    for _ in range(50):
        decision = machine.decide(POLICY, status, fleet.snapshot(), now)
        status = decision.status
        progressing = status.condition(ConditionType.PROGRESSING)
        if progressing is not None and progressing.reason is Reason.WAITING_FOR_ADMIN:
            return status, fleet, now
        fleet.apply(decision)
        now += decision.requeue_after or dt.timedelta(0)
        fleet.settle(fleet.in_flight(), ())
    raise AssertionError("step 1 never waited")


@pytest.fixture
def waiting() -> tuple[InMemoryApiServer, Waiting]:
    api = InMemoryApiServer()
    api.apply(crd.crd(), field_manager="test", force=True)
    cr: dict[str, Any] = {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": {}}
    api.create(cr)
    state = _waiting()
    status = state[0]
    api.apply(
        {**cr, "status": {"upgradeStatus": rollout_status.to_document(status)}},
        field_manager="metax-operator",
        subresource="status",
    )
    return api, state


def _annotations(api: InMemoryApiServer) -> dict[str, str]:
    found: dict[str, str] = api.get(CR_API, spec.KIND, spec.OBJECT_NAME)["metadata"].get("annotations") or {}
    return found


def test_the_cli_writes_what_the_message_tells_kubectl_users_to_write(
    waiting: tuple[InMemoryApiServer, Waiting], capsys: pytest.CaptureFixture[str]
) -> None:
    api, (status, fleet, now) = waiting
    message = api.get(CR_API, spec.KIND, spec.OBJECT_NAME)["status"]["upgradeStatus"]["message"]
    step = int(re.search(r"metax-operator rollout confirm --step (\d+)", message).group(1))  # type: ignore[union-attr]
    kubectl = re.search(r"(kubectl annotate .*? --overwrite)", message).group(1)  # type: ignore[union-attr]
    key, value = shlex.split(kubectl)[4].split("=", 1)

    assert cli_rollout.confirm_waiting_step(api, step) == cli_rollout.EXIT_OK
    assert _annotations(api) == {key: value}
    assert value == status.status.confirm_token and step == 1
    assert f"confirmed step 1: {key}={value}" in capsys.readouterr().out
    # ... and that annotation is what confirms the step in the machine
    confirmed = machine.decide(POLICY, status, fleet.snapshot(), now + dt.timedelta(seconds=1), value)
    assert confirmed.status.status.confirm_token == "" and _reason(confirmed.status) is not Reason.WAITING_FOR_ADMIN
    unconfirmed = machine.decide(POLICY, status, fleet.snapshot(), now + dt.timedelta(seconds=1), None)
    assert unconfirmed.status.status.confirm_token == value and _reason(unconfirmed.status) is Reason.WAITING_FOR_ADMIN


def _reason(status: rollout_status.UpgradeStatus) -> Reason | None:
    progressing = status.condition(ConditionType.PROGRESSING)
    return None if progressing is None else progressing.reason


def test_another_step_is_refused_and_nothing_is_written(
    waiting: tuple[InMemoryApiServer, Waiting], capsys: pytest.CaptureFixture[str]
) -> None:
    api, _ = waiting
    assert cli_rollout.confirm_waiting_step(api, 2) == cli_rollout.EXIT_INVALID
    assert "step 1 waits, not step 2; nothing confirmed" in capsys.readouterr().err
    assert _annotations(api) == {}


def test_nothing_waits(capsys: pytest.CaptureFixture[str]) -> None:
    api = InMemoryApiServer()
    api.apply(crd.crd(), field_manager="test", force=True)
    api.create({"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": {}})
    assert cli_rollout.confirm_waiting_step(api, None) == cli_rollout.EXIT_INVALID
    assert "no driver rollout step waits" in capsys.readouterr().err
