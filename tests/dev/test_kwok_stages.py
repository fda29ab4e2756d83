"""The test control plane's kwok config: kwok's own default stages plus one test-only crash-loop stage.

Aspects: pod-ready gets one more selector term that excludes crash-test pods (so it and the crash stage never
both match a pod), the crash stage is added and matches only Pending, not-deleted crash-test pods, the rest
is kwok's output unchanged, and a default-stages output without pod-ready is refused by name.
"""

from __future__ import annotations

import pytest
import yaml

from metax_dev.controlplane import components, errors

DEFAULTS = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
  next:
    statusTemplate: |
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next:
    delete: true
"""


def test_pod_ready_skips_crash_test_pods_and_the_crash_stage_takes_them() -> None:
    stages = {s["metadata"]["name"]: s for s in yaml.safe_load_all(components.kwok_stages(DEFAULTS))}
    assert list(stages) == ["pod-ready", "pod-delete", "metax-test-pod-crash-loop"]
    ready = stages["pod-ready"]["spec"]["selector"]["matchExpressions"]
    crash = stages["metax-test-pod-crash-loop"]["spec"]["selector"]["matchExpressions"]
    query = ready[-1]["key"]
    assert components.CRASH_TAG_SUFFIX in query and "initContainers" in query
    assert ready[-1] == {"key": query, "operator": "NotIn", "values": ["true"]}
    assert {"key": query, "operator": "In", "values": ["true"]} in crash
    assert {"key": ".status.phase", "operator": "In", "values": ["Pending"]} in crash
    assert {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"} in crash
    template = stages["metax-test-pod-crash-loop"]["spec"]["next"]["statusTemplate"]
    assert "reason: CrashLoopBackOff" in template and "ready: false" in template
    assert stages["pod-delete"] == list(yaml.safe_load_all(DEFAULTS))[1]


def test_default_stages_without_pod_ready_are_refused() -> None:
    with pytest.raises(errors.ControlPlaneError, match="no pod-ready stage"):
        components.kwok_stages(DEFAULTS.split("---")[1])
