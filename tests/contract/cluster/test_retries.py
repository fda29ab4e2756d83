"""The cluster port contract for retries.

Every test runs twice: ``[inmemory]`` on every test run, ``[real]`` (marked ``integration``) against the
test control plane's kube-apiserver through `client.HttpApi` (the ``cluster`` fixture in conftest.py). Where
the two differ, the in-memory server is wrong. Aspects covered:

- retries: 429 with Retry-After, 5xx, lost answers, 409 on read-modify-write, none on apply conflicts.
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.errors import ClusterError, Conflict
from metax_core.ports.cluster import ObjectRef
from metax_k8s import retry
from tests.support.cluster import Cluster, RecordingSleep, event_list


def fast_policy(**options: Any) -> retry.RetryPolicy:
    options.setdefault("sleep", RecordingSleep())
    return retry.RetryPolicy(base_delay=0.05, max_delay=0.2, **options)


# -- retries -------------------------------------------------------------------------------------------------


def test_429_is_retried_after_the_servers_retry_after(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="t")
    faults.fail_next("get", 429, times=2, retry_after=1)
    got = objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert got is not None and got["data"] == {"a": "1"}
    assert sleep.delays == [1.0, 1.0] and faults.pending_faults() == 0


def test_5xx_and_lost_answers_are_retried_with_backoff(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    faults.fail_next("apply", 503, times=2)
    faults.fail_next("list", 500)
    objects.apply(cluster.configmap("cm", {"a": "1"}, labels={"suite": "retry"}), field_manager="t")
    assert [o["metadata"]["name"] for o in objects.list("v1", "ConfigMap", cluster.namespace, "suite=retry").items] == [
        "cm"
    ]
    assert len(sleep.delays) == 3 and all(0 < d <= 0.2 for d in sleep.delays)
    faults.fail_next("get", 0)  # no answer at all: the connection is dropped
    assert objects.get("v1", "ConfigMap", "cm", cluster.namespace) is not None
    assert len(sleep.delays) == 4 and faults.pending_faults() == 0
    faults.fail_next("list", 0, times=10)
    with pytest.raises(retry.Unavailable):
        cluster.objects(policy=fast_policy(attempts=3), api=api).list("v1", "ConfigMap", cluster.namespace)


def test_retries_give_up_with_the_servers_error(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    objects = cluster.objects(policy=fast_policy(attempts=3), api=api)
    faults.fail_next("get", 503, times=5)
    with pytest.raises(ClusterError, match=r"get ConfigMap .*/cm failed \(503\)"):
        objects.get("v1", "ConfigMap", "cm", cluster.namespace)
    assert faults.pending_faults() == 2


def test_409_on_a_read_modify_write_is_retried_after_rereading(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    recorder = cluster.events(api=api, policy=fast_policy(sleep=sleep))
    regarding = ObjectRef("v1", "ConfigMap", "driver-config", cluster.namespace)
    recorder.emit(regarding, reason="Again", message="m")
    faults.fail_next("patch", 409)
    recorder.emit(regarding, reason="Again", message="m")
    (only,) = event_list(cluster)
    assert only["series"]["count"] == 2 and len(sleep.delays) == 1


def test_an_apply_conflict_is_not_retried(cluster: Cluster) -> None:
    api, faults = cluster.faulty()
    sleep = RecordingSleep()
    objects = cluster.objects(policy=fast_policy(sleep=sleep), api=api)
    faults.fail_next("apply", 409)
    with pytest.raises(Conflict):
        objects.apply(cluster.configmap("cm", {"a": "1"}), field_manager="t")
    assert sleep.delays == [] and faults.pending_faults() == 0
