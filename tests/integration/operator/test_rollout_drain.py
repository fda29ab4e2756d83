"""A driver rollout drains a fleet that is never idle (issue 41 item 3; R-ROLLOUT; docs/rollout.md "Draining").

A hundred kwok GPU nodes (4 GPUs each) run a hundred Deployments of three one-GPU pods (300 GPU pods), each with
a PodDisruptionBudget allowing one disruption, placed by the real scheduler; the real disruption controller
keeps the budgets' status and the API server's Eviction API enforces them. One node was cordoned by someone
else before, one runs a bare GPU pod besides. The real operator rolls a new driver out with ``drain`` on,
maxParallel 10 and a 20 s drain timeout (`benchmarks/drain.py` times the same fleet without the bare pod).

Asserted from the API's own watch streams and objects: never more than maxParallel nodes held cordoned by the
rollout; no app ever below its budget (two ready pods); the bare pod is never evicted (no ``force``), its node is
released (uncordoned) after the timeout and the status names the node and the pod, and once the pod is gone it is
drained and upgraded like the others; every node's driver pod deleted exactly once; the rollout completes; no node
left cordoned by the rollout; the node cordoned beforehand still cordoned.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from operator_helpers import Env, wait_for
from rollout_helpers import DeletionRecorder, extra_gpu_nodes
from test_rollout import install, new_driver, upgrade

from metax_core.errors import NotFound
from metax_core.wire import meta
from metax_dev import drainbed
from metax_dev.controlplane import cluster as controlplane

pytestmark = pytest.mark.integration

NODES, GPUS, APPS, REPLICAS, MAX_PARALLEL = 100, 4, 100, 3, 10
APPS_NS = "drain-apps"
POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": "100%", "pause": False}],
    "maxParallel": MAX_PARALLEL,
    "drain": {"enable": True, "timeoutSeconds": 20},
}


@pytest.fixture(autouse=True)
def _diagnose_failures(operator_env: Env, request: pytest.FixtureRequest) -> Iterator[None]:
    """On a failure, print the rollout's status and the operator's log."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        print("status:", json.dumps(upgrade(operator_env), indent=1)[-6000:])
        for p in operator_env.processes:
            print(f"--- operator {p.identity}\n{p.log()[-12000:]}")


def _unschedulable(env: Env, node: str) -> bool:
    return bool((env.api.get("v1", "Node", node).get("spec") or {}).get("unschedulable"))


def _step(env: Env) -> dict[str, Any]:
    return dict(upgrade(env).get("status") or {})


def test_a_busy_fleet_is_drained_within_max_parallel_and_its_budgets_and_given_back(
    operator_env: Env, control_plane: controlplane.ControlPlane
) -> None:
    env = operator_env
    with extra_gpu_nodes(control_plane, env, "dr", NODES) as names:
        drainbed.give_gpus(env.api, names, GPUS)
        blocked, theirs = names[0], names[-1]
        env.api.merge_patch("v1", "Node", theirs, {"spec": {"unschedulable": True}}, field_manager="kubectl")
        drainbed.namespace(env.api, APPS_NS)
        apps = drainbed.apps(env.api, APPS_NS, APPS, REPLICAS)
        drainbed.bare_pod(env.api, APPS_NS, "notebook", blocked)
        try:
            wait_for(
                "every app's pods ready",
                lambda: drainbed.ready_pods(env.api, APPS_NS) == dict.fromkeys(apps, REPLICAS),
                timeout=300,
            )
            spec = install(env, POLICY, names)
            watch = drainbed.Watch(env.api, names, APPS_NS, apps).start()
            recorder = DeletionRecorder(env.api, names).start()
            new_driver(env, spec)
            released = wait_for(
                "the node with the bare pod released after the drain timeout",
                lambda: next((n for n in _step(env).get("releasedNodes") or [] if n["name"] == blocked), None),
                timeout=180,
            )
            assert "drain-apps/notebook" in released["message"] and "no controller" in released["message"], released
            wait_for("the released node uncordoned", lambda: not _unschedulable(env, blocked), timeout=30)
            assert env.api.get("v1", "Pod", "notebook", APPS_NS)["metadata"].get("deletionTimestamp") is None
            env.api.delete("v1", "Pod", "notebook", APPS_NS)  # its user is done: now it can be drained
            wait_for(
                "the rollout complete",
                lambda: upgrade(env).get("phase") == "Idling" and not upgrade(env).get("upgrading"),
                timeout=600,
            )
            recorder.stop()
            watch.stop()
            deleted = sorted(n for loop in recorder.snapshot() for n in loop)
            assert deleted == sorted(names), recorder.snapshot()  # every node's driver replaced, each once
            assert 1 <= watch.most_marked <= MAX_PARALLEL, watch.most_marked
            assert min(watch.fewest_ready.values()) >= REPLICAS - 1, watch.fewest_ready  # no budget broken
            for name in names:
                node = env.api.get("v1", "Node", name)
                assert meta.ROLLOUT_CORDON not in (node["metadata"].get("annotations") or {}), name
                assert _unschedulable(env, name) is (name == theirs), name
            assert not _step(env).get("drainingNodes")
        finally:
            with contextlib.suppress(NotFound):
                env.api.delete("v1", "Namespace", APPS_NS)
