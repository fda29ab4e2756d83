"""The webhook (R-WEBHOOK): AdmissionReview translation, the HTTPS server, its certificates.

Covers: each family of bad spec refused with field paths under ``spec.`` and a per-field cause; a good spec
allowed; mid-rollout only enableRollout/pause (and metadata such as the rollout-confirm annotation) may
change; an unreadable request is a 400, not a crash; driver-config with an unknown module parameter refused,
other ConfigMaps untouched; the server over real TLS (trusting only the CA it published in caBundle),
/healthz and /readyz; the Secret reused across restarts; forced, due and expired certificates renewed and
still trusted; two replicas end with one certificate. The real API server calls it in
tests/integration/chart/test_webhook_tls.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from metax_core.errors import ClusterError
from metax_core.rollout import status as rollout_status
from metax_k8s import admission
from metax_k8s.inmemory import InMemoryApiServer
from services.webhook import certs, server, store

GOOD_SPEC: dict[str, Any] = {
    "registry": "r.example/metax",
    "driver": {
        "payload": {"version": "2.0.0"},
        "upgradePolicy": {"enableRollout": True, "upgradeSteps": [{"replicas": 1}, {"replicas": "100%"}]},
    },
}


def _object(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator", **extra.pop("metadata", {})},
        "spec": spec,
        **extra,
    }


def _review(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "operation": "UPDATE" if old else "CREATE", "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _answer(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = admission.review(_review(obj, old), admission.CLUSTER_OPERATOR_PATH)["response"]
    assert response["uid"] == "u-1"
    return response


def test_a_good_spec_is_allowed() -> None:
    assert _answer(_object(GOOD_SPEC)) == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        (
            {**GOOD_SPEC, "driver": {**GOOD_SPEC["driver"], "deployPolicy": "Sometimes"}},
            "spec.driver.deployPolicy",
            "PreferCloud",
        ),
        ({**GOOD_SPEC, "vfio-manager": {}}, "spec.vfio-manager", "did you mean 'vfioManager'"),
        (
            {"driver": {"payload": {"version": "1"}, "upgradePolicy": {"maxParallel": "150%"}}},
            "spec.driver.upgradePolicy.maxParallel",
            'from "0%" to "100%"',
        ),
        ({"registry": "r"}, "spec.driver.payload.version", "is required"),
        (
            {
                "driver": {
                    "payload": {"version": "1"},
                    "upgradePolicy": {"enableRollout": True, "upgradeSteps": [{"replicas": "50%"}]},
                }
            },
            "spec.driver.upgradePolicy.upgradeSteps[0].replicas",
            '"100%"',
        ),
    ],
    ids=["wrong-enum", "unknown-field", "bad-percentage", "payload-version-missing", "steps-short-of-100"],
)
def test_each_family_of_bad_spec_is_refused_with_its_field_path(spec: dict[str, Any], field: str, says: str) -> None:
    response = _answer(_object(spec))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    causes = {c["field"]: c["message"] for c in response["status"]["details"]["causes"]}
    assert field in causes and says in causes[field]
    assert f"{field}: " in response["status"]["message"]


def test_every_problem_is_reported_at_once() -> None:
    spec = {"driver": {"deployPolicy": "Sometimes"}, "maca": {"payload": {"images": ["maca"]}}, "gpuDevic": {}}
    causes = [c["field"] for c in _answer(_object(spec))["status"]["details"]["causes"]]
    assert {"spec.driver.deployPolicy", "spec.maca.payload.images[0]", "spec.gpuDevic"} <= set(causes)


def _rolling(spec: dict[str, Any]) -> dict[str, Any]:
    status = rollout_status.UpgradeStatus(upgrading=True, phase=rollout_status.Phase.PROGRESSING)
    return _object(spec, status={"upgradeStatus": rollout_status.to_document(status)})


def _with_policy(**changes: Any) -> dict[str, Any]:
    return {
        **GOOD_SPEC,
        "driver": {**GOOD_SPEC["driver"], "upgradePolicy": {**GOOD_SPEC["driver"]["upgradePolicy"], **changes}},
    }


def test_mid_rollout_a_max_parallel_edit_is_refused_and_pause_is_accepted() -> None:
    old = _rolling(GOOD_SPEC)
    refused = _answer(_object(_with_policy(maxParallel=1)), old)
    assert refused["allowed"] is False
    assert [c["field"] for c in refused["status"]["details"]["causes"]] == ["spec.driver.upgradePolicy.maxParallel"]
    assert "cannot change while a driver rollout is in progress" in refused["status"]["message"]
    assert _answer(_object(_with_policy(pause=True)), old)["allowed"] is True
    confirm = _object(GOOD_SPEC, metadata={"annotations": {"metax-tech.com/rollout-confirm": "step-1"}})
    assert _answer(confirm, old)["allowed"] is True
    # Without a rollout any valid edit passes.
    assert _answer(_object(_with_policy(maxParallel=1)), _object(GOOD_SPEC))["allowed"] is True


def _firmware_edit(flashing: admission.FlashingNodes, **driver: Any) -> dict[str, Any]:
    new = {**GOOD_SPEC, "driver": {**GOOD_SPEC["driver"], **driver}}
    body = _review(_object(new), _object(GOOD_SPEC))
    response: dict[str, Any] = admission.review(body, admission.CLUSTER_OPERATOR_PATH, flashing)["response"]
    return response


def test_while_a_node_flashes_firmware_the_fields_deciding_it_are_refused_naming_the_node() -> None:
    """R-FW (issue 41 item 4): the lock `policy.firmware_edit_errors` describes, called by the webhook."""
    asked: list[int] = []

    def flashing() -> list[str]:
        asked.append(1)
        return ["gpu-3"]

    refused = _firmware_edit(flashing, fwEnableVirt=True, payload={"version": "2.1.0"})
    assert [c["field"] for c in refused["status"]["details"]["causes"]] == [
        "spec.driver.fwEnableVirt",
        "spec.driver.payload.version",
    ]
    assert "cannot be changed while firmware is being flashed (nodes: gpu-3)" in refused["status"]["message"]
    assert _firmware_edit(list, fwEnableVirt=True)["allowed"] is True  # nothing flashes
    asked.clear()
    assert _firmware_edit(flashing, log={"level": "debug"})["allowed"] is True  # not a firmware field
    assert asked == []  # and the cluster was not even asked


def test_when_the_cluster_cannot_say_whether_firmware_flashes_the_firmware_fields_stay() -> None:
    def unreachable() -> list[str]:
        raise ClusterError("list nodes", "", "connection refused")

    refused = _firmware_edit(unreachable, fwUpgradePolicy="PreferCloud")
    assert refused["allowed"] is False
    assert "cannot tell whether firmware is being flashed" in refused["status"]["message"]


def test_a_stored_invalid_spec_may_be_fixed_by_any_valid_update() -> None:
    assert _answer(_object(GOOD_SPEC), _rolling({"driver": {"deployPolicy": "Bad"}}))["allowed"] is True


def test_unreadable_requests_raise_value_error_and_deletes_pass() -> None:
    with pytest.raises(ValueError, match="AdmissionReview"):
        admission.review({"kind": "Pod"}, admission.CLUSTER_OPERATOR_PATH)
    with pytest.raises(ValueError, match="no admission rules"):
        admission.review(_review(_object(GOOD_SPEC)), "/elsewhere")
    deleting = {"kind": "AdmissionReview", "request": {"uid": "x", "operation": "DELETE"}}
    assert admission.review(deleting, admission.CLUSTER_OPERATOR_PATH)["response"]["allowed"] is True


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "metax-operator"},
        "data": data,
    }


def test_driver_config_with_an_unknown_module_parameter_is_refused() -> None:
    bad = _review(_config_map("driver-config", {"module-params": "xcore_page_size: 4\nfoo: 1\n"}))
    response = admission.review(bad, admission.DRIVER_CONFIG_PATH)["response"]
    assert response["allowed"] is False
    fields = [c["field"] for c in response["status"]["details"]["causes"]]
    assert any(f.startswith("data.module-params") for f in fields), fields
    other = _review(_config_map("something-else", {"module-params": "foo: 1"}))
    assert admission.review(other, admission.DRIVER_CONFIG_PATH)["response"]["allowed"] is True
    good = _review(_config_map("driver-config", {"module-params": "xcore_page_size: 4\n"}))
    assert admission.review(good, admission.DRIVER_CONFIG_PATH)["response"]["allowed"] is True


# --- the server ---------------------------------------------------------------------------------------


VWC = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "metax-operator-webhook"},
    "webhooks": [
        {
            "name": "clusteroperators.gpu.metax-tech.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1/validate/clusteroperator"},
        }
    ],
}


@pytest.fixture
def api() -> InMemoryApiServer:
    memory = InMemoryApiServer()
    memory.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "metax-operator"}})
    memory.create(VWC)
    return memory


SETTINGS = server.Settings(host="127.0.0.1", port=0, extra_hosts=("127.0.0.1",), cert_days=30)


@pytest.fixture
def running(api: InMemoryApiServer) -> Iterator[server.WebhookServer]:
    webhook = server.serve(SETTINGS, api)
    try:
        yield webhook
    finally:
        webhook.shutdown()


def _ca_bundle(api: InMemoryApiServer) -> bytes:
    config = api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook")
    return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])


def _request(
    webhook: server.WebhookServer, ca: bytes, method: str, path: str, body: object = None
) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=ca.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_server_answers_over_tls_trusted_by_the_published_ca_bundle(
    running: server.WebhookServer, api: InMemoryApiServer
) -> None:
    ca = _ca_bundle(api)
    assert running.ready
    assert _request(running, ca, "GET", "/healthz") == (200, b"ok\n")
    assert _request(running, ca, "GET", "/readyz") == (200, b"ok\n")
    code, body = _request(running, ca, "POST", admission.CLUSTER_OPERATOR_PATH, _review(_object({"registry": "r"})))
    assert code == 200
    answer = json.loads(body)["response"]
    assert answer["allowed"] is False and "spec.driver.payload.version" in answer["status"]["message"]
    assert _request(running, ca, "POST", admission.CLUSTER_OPERATOR_PATH, {"kind": "Pod"})[0] == 400
    assert _request(running, ca, "GET", "/nothing")[0] == 404


def test_not_ready_until_the_webhook_configuration_trusts_the_ca() -> None:
    memory = InMemoryApiServer()
    memory.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "metax-operator"}})
    webhook = server.serve(SETTINGS, memory)
    try:
        assert not webhook.ready
        memory.create(VWC)
        webhook.check()
        assert webhook.ready
    finally:
        webhook.shutdown()


def test_a_restart_reuses_the_stored_certificate(running: server.WebhookServer, api: InMemoryApiServer) -> None:
    first = running.material
    again = server.serve(SETTINGS, api)
    try:
        assert again.material == first
    finally:
        again.shutdown()


def test_rotated_certificates_keep_working(running: server.WebhookServer, api: InMemoryApiServer) -> None:
    before = running.material
    assert before is not None
    running.check(force=True)
    assert running.material is not None and running.material.serving != before.serving
    assert running.material.ca == before.ca
    assert _request(running, _ca_bundle(api), "GET", "/readyz")[0] == 200
    running.check(force_ca=True)
    assert running.material.ca != before.ca and running.material.previous_ca == before.ca.cert
    bundle = _ca_bundle(api)
    assert before.ca.cert in bundle and running.material.ca.cert in bundle
    # A client that still trusts only the old CA is not cut off mid-rotation, and a new one trusts the new.
    assert _request(running, bundle, "GET", "/healthz")[0] == 200


def test_expired_or_due_certificates_are_renewed_on_the_next_check(api: InMemoryApiServer) -> None:
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    old = server.WebhookServer(SETTINGS, api, clock=lambda: past)
    old.check()
    old.shutdown()
    stored, _ = store.read(api, "metax-operator", "metax-operator-webhook")
    assert stored is not None and certs.expired(stored.serving.cert, dt.datetime.now(dt.UTC))
    webhook = server.serve(SETTINGS, api)
    try:
        assert webhook.material is not None and not certs.expired(
            webhook.material.serving.cert, dt.datetime.now(dt.UTC)
        )
        assert _request(webhook, _ca_bundle(api), "GET", "/readyz")[0] == 200
    finally:
        webhook.shutdown()


def test_renewal_is_due_when_a_third_of_the_lifetime_is_left() -> None:
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    ca = certs.new_ca("ca", now, dt.timedelta(days=300))
    pair = certs.issue(ca, ["a.example", "127.0.0.1"], now, dt.timedelta(days=30))
    assert not certs.renewal_due(pair.cert, now + dt.timedelta(days=19))
    assert certs.renewal_due(pair.cert, now + dt.timedelta(days=21))
    assert certs.covers(pair.cert, ["a.example", "127.0.0.1"]) and not certs.covers(pair.cert, ["b.example"])
    material = certs.Material(ca=ca, serving=pair)
    assert certs.renew(material, ["a.example"], now, dt.timedelta(days=30)) is None
    assert certs.renew(material, ["b.example"], now, dt.timedelta(days=30)) is not None


def test_two_replicas_end_with_one_certificate(api: InMemoryApiServer) -> None:
    a = server.WebhookServer(SETTINGS, api)
    b = server.WebhookServer(SETTINGS, api)
    try:
        a.check()
        b.check()
        assert a.material == b.material
    finally:
        a.shutdown()
        b.shutdown()


def test_settings_from_the_environment_name_every_bad_variable() -> None:
    settings = server.settings_from_env(
        {"METAX_NAMESPACE": "ns", "METAX_WEBHOOK_PORT": "8443", "METAX_WEBHOOK_EXTRA_HOSTS": "127.0.0.1, x"}
    )
    assert (settings.namespace, settings.port, settings.extra_hosts) == ("ns", 8443, ("127.0.0.1", "x"))
    with pytest.raises(Exception, match="METAX_WEBHOOK_PORT: must be a positive integer.*METAX_WEBHOOK_CERT_DAYS"):
        server.settings_from_env({"METAX_WEBHOOK_PORT": "x", "METAX_WEBHOOK_CERT_DAYS": "-1"})
