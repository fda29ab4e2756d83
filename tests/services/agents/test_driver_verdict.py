"""driver-manager's verdict, from the real agent on a fake host to the operator's failure rule (issue 41 item 1,
fail fast; R-ROLLOUT, R-DRIVER; `metax_core.wire.driver_verdict`).

The writer is driver-manager's own round (a load the kernel refuses, a payload without a module for the running
kernel); the reader is what the operator runs: the Node as its node cache keeps it (`informers.slim_node`), the
driver pod as its pod cache keeps it (`informers.slim_pod`), `fleet.node_verdicts` and `fleet.pod_failed`. So the
test never writes the annotation in the reader's form. With the default 600 s ready timeout, the pod that reached
the verdict (named by its HOSTNAME) is failed at once; the pod replacing it is not, even in the same second; a
driver that loads takes the verdict away.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import shutil
from typing import Any

import pytest

from metax_core.rollout import fleet
from metax_core.wire import driver_verdict
from services.operator import informers

from .conftest import NAMESPACE, NODE, PAYLOAD_VERSION, Node, make_node, write_payload
from .test_driver_manager import NEW_VERSION, _running_ours, host, manager

READY_TIMEOUT = 600.0  # the operator's default METAX_DRIVER_READY_TIMEOUT
NOW = dt.datetime.now(dt.UTC)


POD = "metax-driver-x"
"""The driver pod's name: the runtime sets the container's HOSTNAME to it (the process node does the same)."""


@pytest.fixture(autouse=True)
def _in_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", POD)


def driver_pod(started: dt.datetime, name: str = POD) -> dict[str, Any]:
    """The driver pod as the API returns it: Running, not Ready, created and started at ``started``."""
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "creationTimestamp": stamp},
        "spec": {"nodeName": NODE},
        "status": {
            "phase": "Running",
            "startTime": stamp,
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "driver-manager", "restartCount": 0, "state": {"running": {}}}],
        },
    }


def verdict_of(n: Node) -> driver_verdict.Verdict | None:
    verdicts, problems = fleet.node_verdicts([informers.slim_node(n.node())])
    assert problems == []
    return verdicts.get(NODE)


def failed(pod: dict[str, Any], verdict: driver_verdict.Verdict | None) -> bool:
    slim = informers.slim_pod(pod)
    return fleet.pod_failed(slim, NOW, ready_timeout=READY_TIMEOUT, crash_restarts=5, verdict=verdict)


def test_a_load_the_kernel_refuses_fails_the_pod_at_once_and_a_load_takes_the_verdict_away(
    tmp_path: pathlib.Path,
) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.fake.fail_module_load("metax")
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)
    m = manager(n)
    m.tick()
    verdict = verdict_of(n)
    assert verdict is not None
    assert (verdict.cause, verdict.version, verdict.pod) == (driver_verdict.Cause.LOAD_REFUSED, PAYLOAD_VERSION, POD)
    assert failed(driver_pod(started), verdict)  # seconds old, 600 s timeout: failed by the verdict alone
    assert not failed(driver_pod(started), None)  # without it, the timeout would have to pass
    assert not failed(driver_pod(verdict.at, "metax-driver-y"), verdict)  # the pod replacing it, same second

    written = n.node()["metadata"]["annotations"][driver_verdict.ANNOTATION]
    for _ in range(2):  # the back-off's retries fail the same way: the Node keeps the same verdict
        n.clock.advance(600)
        m.wake()
        m.tick()
    assert n.node()["metadata"]["annotations"][driver_verdict.ANNOTATION] == written

    n.fake.clear_faults()
    n.clock.advance(600)
    m.wake()
    m.tick()
    assert driver_verdict.ANNOTATION not in (n.node()["metadata"].get("annotations") or {})
    assert verdict_of(n) is None


def test_a_new_driver_refused_after_the_previous_one_came_back_is_a_verdict_on_the_new_version(
    tmp_path: pathlib.Path,
) -> None:
    n = make_node(tmp_path, host(loaded=False))
    _running_ours(n, tmp_path)
    assert verdict_of(n) is None
    manager(n, payload_version=NEW_VERSION).tick()
    verdict = verdict_of(n)
    assert verdict is not None and (verdict.cause, verdict.version) == (driver_verdict.Cause.LOAD_REFUSED, NEW_VERSION)
    assert "Invalid module format" in verdict.message


def test_a_payload_without_a_module_for_the_running_kernel_is_a_verdict(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=True))
    shutil.rmtree(n.payload)
    write_payload(n.payload, kernels=["6.12.117+deb12-amd64"])
    manager(n).tick()
    verdict = verdict_of(n)
    assert verdict is not None and verdict.cause is driver_verdict.Cause.KERNEL_NOT_COVERED
    assert verdict.version == PAYLOAD_VERSION and "6.12.117+deb12-amd64" in verdict.message
