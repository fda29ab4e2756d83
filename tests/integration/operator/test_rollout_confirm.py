"""A three-step rollout confirmed step by step with the operator restarted between confirmations (issue 41 item
5; R-ROLLOUT, docs/rollout.md "Confirming a step").

The administrator's previous, consumed confirmation stays in the annotation while the next step waits; the
operator that restarted meanwhile remembers nothing but cluster-operator's status. Asserted: no
ConfirmationIgnored Event at all, and in every status the API stored (a watch records each one)
``currentUpgradeReplicas`` never above the nodes of the step it counts.
"""

from __future__ import annotations

import pytest
from operator_helpers import Env, cluster_operator, wait_for
from rollout_helpers import StatusRecorder, confirm, extra_gpu_nodes
from test_rollout import install, new_driver, seen_latest, upgrade, waiting_step

from metax_core.cluster import rbac
from metax_core.wire import event_reasons
from metax_dev.controlplane import cluster as controlplane

pytestmark = pytest.mark.integration

THREE_MANUAL_STEPS = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1}, {"replicas": 2}, {"replicas": "100%"}],
    "maxParallel": 1,
}
STEP_SIZES = (1, 2, 3)
"""Nodes on the new driver when each step is done, on three nodes."""


def ignored_events(env: Env) -> list[str]:
    return [
        str(e.get("note") or "")
        for e in env.api.list("events.k8s.io/v1", "Event", namespace=rbac.EVENTS_NAMESPACE).items
        if e.get("reason") == event_reasons.CONFIRMATION_IGNORED
        and (e.get("regarding") or {}).get("name") == "cluster-operator"
    ]


def test_confirmed_step_by_step_across_operator_restarts_nothing_is_reported_ignored(
    operator_env: Env, control_plane: controlplane.ControlPlane
) -> None:
    env = operator_env
    with extra_gpu_nodes(control_plane, env, "cf", 3) as names:
        spec = install(env, THREE_MANUAL_STEPS, names)
        before = ignored_events(env)
        recorder = StatusRecorder(env.api).start()
        new_driver(env, spec)
        for step in (1, 2, 3):
            wait_for(f"step {step} waits", lambda s=step: waiting_step(env) == s, timeout=120)
            for p in list(env.processes):  # the operator restarts: the next one knows only the status
                p.stop()
            env.processes.clear()
            env.start_operator(f"op-{step}")
            # an unrelated edit the new operator must have reconciled (observedGeneration): it has then judged the
            # waiting step with the previous step's token still in the annotation
            spec["gpuDevice"] = {"healthyInterval": 6 + step}
            env.api.apply(cluster_operator(spec), field_manager="helm")
            wait_for("the restarted operator reconciled", lambda: seen_latest(env), timeout=60)
            assert f"confirmed step {step}" in confirm(env.kubeconfig, step)
        wait_for("rollout complete", lambda: upgrade(env).get("phase") == "Idling", timeout=120)
        recorder.stop()
        stored = recorder.snapshot()
        assert len(stored) > 6  # the watch saw the rollout's statuses, not one final write
        for st in stored:
            size = STEP_SIZES[int(st.get("currentStepIndex") or 0)]
            assert int(st.get("currentUpgradeReplicas") or 0) <= size, st
        assert ignored_events(env) == before, ignored_events(env)
