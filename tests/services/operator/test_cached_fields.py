"""The node and pod caches decode only what their slim copies read, and lose nothing by it (issue 43 item 7).

Aspects covered:

- a pod or node decoded with its shape (`cached_fields`) from the bytes, as the real adapter decodes a list page
  and a watch event, slims to the same copy as the whole object: for the operator's pods and kwok's nodes as a
  real kube-apiserver (v1.36.3) served them, managed fields included (tests/data/api_objects), and for the cases
  those recordings lack (a crash-looping driver pod being deleted, a node reporting GPU health);
- the shaped object carries nothing of the spec, the managed fields or the other status, and the in-memory
  server's `decoding.prune` gives the same dicts as decoding the bytes;
- an object that does not fit its shape arrives whole and still slims the same; an ``ERROR`` event's Status
  is always whole (its code decides a relist).
"""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest

from metax_core.health import report
from metax_core.wire import driver_verdict
from metax_k8s import decoding
from services.operator import cached_fields, informers

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "api_objects"
PODS = json.loads((DATA / "pods.json").read_text())["items"]
NODES = json.loads((DATA / "nodes.json").read_text())["items"]


def _crash_looping_and_deleted(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = "2026-12-07T16:40:00Z"
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pod["status"]["containerStatuses"][0].update(
        restartCount=6, state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}
    )
    return pod


def _reporting_health(node: dict[str, Any]) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node["metadata"].setdefault("annotations", {})[report.ANNOTATION] = '{"gpus": []}'
    node["metadata"]["annotations"][driver_verdict.ANNOTATION] = "cannot-load"
    node["status"]["conditions"].append(
        {"type": report.CONDITION_TYPE, "status": "False", "reason": "GpuLost", "message": "GPU 0 fell off the bus"}
    )
    return node


def _driver_pod() -> dict[str, Any]:
    return next(p for p in PODS if p["metadata"]["labels"]["metax-tech.com/component"] == "driver")


POD_CASES = [*PODS, _crash_looping_and_deleted(_driver_pod())]
NODE_CASES = [*NODES, _reporting_health(NODES[0])]
SHAPES = [
    pytest.param(pod, cached_fields.PodFields, informers.slim_pod, id=f"pod-{i}") for i, pod in enumerate(POD_CASES)
] + [
    pytest.param(node, cached_fields.NodeFields, informers.slim_node, id=f"node-{i}")
    for i, node in enumerate(NODE_CASES)
]


def _as_event(obj: dict[str, Any], kind: str = "MODIFIED") -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def _as_page(*objs: dict[str, Any]) -> bytes:
    page = {"kind": "List", "metadata": {"resourceVersion": "42", "continue": "next"}, "items": list(objs)}
    return json.dumps(page).encode()


@pytest.mark.parametrize(("whole", "fields", "slim"), SHAPES)
def test_an_object_decoded_with_its_shape_slims_like_the_whole_object(whole: Any, fields: Any, slim: Any) -> None:
    from_event = decoding.event(_as_event(whole), fields)["object"]
    page = decoding.page(_as_page(whole), fields)
    assert page["metadata"] == {"resourceVersion": "42", "continue": "next"}
    (from_page,) = page["items"]
    assert from_event == from_page == decoding.prune(whole, fields)
    assert slim(from_event) == slim(whole)
    assert from_event["metadata"]["resourceVersion"] == whole["metadata"]["resourceVersion"]  # a watch resumes by it


@pytest.mark.parametrize(("whole", "fields", "slim"), SHAPES)
def test_a_shaped_object_has_none_of_the_spec_managed_fields_or_other_status(
    whole: Any, fields: Any, slim: Any
) -> None:
    shaped = decoding.event(_as_event(whole), fields)["object"]
    assert "managedFields" in whole["metadata"] and "managedFields" not in shaped["metadata"]
    assert "uid" not in shaped["metadata"] and "ownerReferences" not in shaped["metadata"]
    if fields is cached_fields.PodFields:
        assert whole["spec"]["containers"] and set(shaped["spec"]) <= {"nodeName"}
        assert "hostIP" not in shaped["status"] and "qosClass" not in shaped["status"]
        assert len(json.dumps(shaped)) * 4 < len(json.dumps(whole))
    else:  # labels, annotations and conditions whole: what a node mostly is
        assert "spec" not in shaped and set(shaped["status"]) == {"conditions"}
        assert len(json.dumps(shaped)) * 2 < len(json.dumps(whole))


def test_an_object_that_does_not_fit_its_shape_arrives_whole_and_slims_the_same(caplog: Any) -> None:
    odd = copy.deepcopy(_driver_pod())
    odd["status"]["containerStatuses"][0]["restartCount"] = "2"  # a string where the API says an integer
    from_event = decoding.event(_as_event(odd), cached_fields.PodFields)["object"]
    assert from_event == odd and decoding.page(_as_page(odd), cached_fields.PodFields)["items"] == [odd]
    assert decoding.prune(odd, cached_fields.PodFields) == odd
    assert informers.slim_pod(from_event)["status"]["restarts"] == 2
    assert "did not fit the fields kept" in caplog.text and "restartCount" in caplog.text


def test_an_error_event_is_the_whole_status_the_relist_reads() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    status["message"] = "too old resource version: 1 (42)"
    for fields in (cached_fields.PodFields, cached_fields.NodeFields):
        assert decoding.event(_as_event(status, "ERROR"), fields) == {"type": "ERROR", "object": status}
