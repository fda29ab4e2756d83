"""The validating webhook called by the real kube-apiserver over TLS (R-WEBHOOK).

The chart is installed with the README's command plus ``operator.webhook.url`` pointing at a webhook server
that runs in this test process on loopback (the kwok "pods" run nothing); the server fills the chart's Secret
with its own CA and certificate and patches ``caBundle`` in, then the release is upgraded to
``failurePolicy: Fail`` (``caBundle`` survives ``helm upgrade``).

Covers, through server-side apply as an administrator: each family of bad spec refused with its field path
(wrong enum, unknown field, bad percentage and the last step short of 100% are refused by the CRD's own
schema before admission; a missing payload version and decreasing steps by the webhook); a ``maxParallel``
edit mid-rollout refused, ``pause`` and the rollout-confirm annotation accepted; a driver-config ConfigMap
with an unknown module parameter refused; the firmware fields refused while a node is labelled flashing (R-FW);
renewed certificates (serving and CA) keep working; an expired
certificate is refused by the API server (fail closed) until the server renews it on restart; the
``metax-operator-webhook`` console script, run as its own process, serves the API server the same way.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metax_core.dra import DRIVER
from metax_core.dra import claims as dra_claims
from metax_core.errors import ClusterError
from metax_core.node import labels
from metax_core.rollout import status as rollout_status
from metax_dev.controlplane import cluster
from metax_k8s import client
from services.webhook import server
from tests.support.chart import CHART_DIR, NAMESPACE, RELEASE, Helm, install_command

pytestmark = pytest.mark.integration

API = "gpu.metax-tech.com/v1alpha1"
DENIED = 'admission webhook "clusteroperators.gpu.metax-tech.com" denied the request'
VERSION = "2.18.0"


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(control_plane.kubeconfig_path))


def _settings(port: int, cert_days: int = 365) -> server.Settings:
    return server.Settings(
        namespace=NAMESPACE, host="127.0.0.1", port=port, extra_hosts=("127.0.0.1",), cert_days=cert_days
    )


@pytest.fixture(scope="module")
def webhook(
    control_plane: cluster.ControlPlane, api: client.HttpApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[server.WebhookServer]:
    helm = Helm(control_plane.kubeconfig_path, tmp_path_factory.mktemp("helm"))
    running = server.WebhookServer(_settings(0), api)
    url = f"operator.webhook.url=https://127.0.0.1:{running.port}"
    try:
        helm.run(*install_command("r.example/metax", VERSION), "--set", url)
        running.start()
        assert running.ready
        upgrade = ["upgrade", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--reuse-values", "--wait"]
        helm.run(*upgrade, "--set", "operator.webhook.failurePolicy=Fail")
        yield running
    finally:
        running.shutdown()
        if RELEASE in helm.run("list", "-n", NAMESPACE, "-q").stdout:
            helm.run("uninstall", RELEASE, "-n", NAMESPACE, "--wait")


def _current(api: client.HttpApi) -> dict[str, Any]:
    return api.get(API, "ClusterOperator", "cluster-operator")


def _apply(api: client.HttpApi, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "cluster-operator"}
    if annotations:
        metadata["annotations"] = annotations
    obj = {"apiVersion": API, "kind": "ClusterOperator", "metadata": metadata, "spec": spec}
    return api.apply(obj, field_manager="admin", force=True)


def _good() -> dict[str, Any]:
    return {
        "registry": "r.example/metax",
        "driver": {
            "payload": {"version": VERSION},
            "upgradePolicy": {"enableRollout": True, "upgradeSteps": [{"replicas": 1}, {"replicas": "100%"}]},
        },
    }


def test_the_ca_bundle_is_trusted_and_survives_helm_upgrade(webhook: server.WebhookServer, api: client.HttpApi) -> None:
    config = api.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook")
    assert webhook.material is not None
    bundle = webhook.material.ca_bundle(dt.datetime.now(dt.UTC))
    for hook in config["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == bundle
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    _apply(api, _good())


@pytest.mark.parametrize(
    ("change", "path", "by_webhook"),
    [
        ({"driver": {"deployPolicy": "Sometimes"}}, "spec.driver.deployPolicy", False),
        ({"vfio-manager": {"deploy": True}}, "vfio-manager", False),
        ({"driver": {"upgradePolicy": {"maxParallel": "150%"}}}, "spec.driver.upgradePolicy.maxParallel", False),
        ({"driver": {"payload": {"version": None}}}, "spec.driver.payload.version", True),
        (
            {"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 1}, {"replicas": "50%"}]}}},
            "upgradeSteps",
            False,
        ),
        (
            {"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 3}, {"replicas": 2}, {"replicas": "100%"}]}}},
            "spec.driver.upgradePolicy.upgradeSteps[1].replicas",
            True,
        ),
    ],
    ids=[
        "wrong-enum",
        "unknown-field",
        "bad-percentage",
        "payload-version-missing",
        "steps-short-of-100",
        "steps-decrease",
    ],
)
def test_each_family_of_bad_spec_is_refused_by_the_api_server_with_its_path(
    webhook: server.WebhookServer, api: client.HttpApi, change: dict[str, Any], path: str, by_webhook: bool
) -> None:
    with pytest.raises(ClusterError) as refused:
        _change(api, change)
    message = str(refused.value)
    assert path in message
    if by_webhook:
        assert DENIED in message
    assert _current(api)["spec"]["driver"]["payload"]["version"] == VERSION  # nothing was stored


def _change(api: client.HttpApi, change: dict[str, Any]) -> None:
    """Server-side apply of the changed spec; a removal (None) as a merge patch (`kubectl patch --type=merge`):
    Helm co-owns every field, so leaving a field out of an apply would not remove it."""
    if _has_none(change):
        api.merge_patch(API, "ClusterOperator", "cluster-operator", {"spec": change}, field_manager="admin")
    else:
        _apply(api, _merge(_good(), change))


def _has_none(change: object) -> bool:
    return change is None or (isinstance(change, dict) and any(_has_none(v) for v in change.values()))


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def _set_rollout(api: client.HttpApi, upgrading: bool) -> None:
    phase = rollout_status.Phase.PROGRESSING if upgrading else rollout_status.Phase.IDLING
    document = rollout_status.to_document(rollout_status.UpgradeStatus(upgrading=upgrading, phase=phase))
    body = {"apiVersion": API, "kind": "ClusterOperator", "metadata": {"name": "cluster-operator"}}
    api.apply({**body, "status": {"upgradeStatus": document}}, field_manager="rollout-test", subresource="status")


def test_mid_rollout_only_pause_enable_rollout_and_annotations_may_change(
    webhook: server.WebhookServer, api: client.HttpApi
) -> None:
    _apply(api, _good())
    _set_rollout(api, upgrading=True)
    try:
        with pytest.raises(ClusterError) as refused:
            _apply(api, _merge(_good(), {"driver": {"upgradePolicy": {"maxParallel": 1}}}))
        assert DENIED in str(refused.value)
        assert "spec.driver.upgradePolicy.maxParallel: cannot change while a driver rollout is in progress" in str(
            refused.value
        )
        paused = _apply(api, _merge(_good(), {"driver": {"upgradePolicy": {"pause": True}}}))
        assert paused["spec"]["driver"]["upgradePolicy"]["pause"] is True
        confirmed = _apply(
            api,
            _merge(_good(), {"driver": {"upgradePolicy": {"pause": True}}}),
            annotations={"metax-tech.com/rollout-confirm": "1"},
        )
        assert confirmed["metadata"]["annotations"]["metax-tech.com/rollout-confirm"] == "1"
    finally:
        _set_rollout(api, upgrading=False)
    _apply(api, _merge(_good(), {"driver": {"upgradePolicy": {"maxParallel": 1}}}))  # allowed once idle


def test_driver_config_with_an_unknown_module_parameter_is_refused(
    webhook: server.WebhookServer, api: client.HttpApi
) -> None:
    def config_map(params: str) -> dict[str, Any]:
        meta = {"name": "driver-config", "namespace": NAMESPACE}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"module-params": params}}

    with pytest.raises(
        ClusterError,
        match=r"(?s)driver-config.gpu.metax-tech.com.*denied.*data\.module-params.foo: unknown module parameter",
    ):
        api.apply(config_map("xcore_page_size: 4\nfoo: 1\n"), field_manager="admin")
    try:
        api.apply(config_map("xcore_page_size: 4\n"), field_manager="admin")
    finally:
        api.delete("v1", "ConfigMap", "driver-config", NAMESPACE)


def _refused_by_webhook(api: client.HttpApi) -> str:
    with pytest.raises(ClusterError) as refused:
        _change(api, {"driver": {"payload": {"version": None}}})
    return str(refused.value)


def test_renewed_certificates_keep_working(webhook: server.WebhookServer, api: client.HttpApi) -> None:
    assert webhook.material is not None
    first = webhook.material
    webhook.check(force=True)
    assert webhook.material.serving != first.serving and webhook.material.ca == first.ca
    assert DENIED in _refused_by_webhook(api)
    webhook.check(force_ca=True)
    assert webhook.material.ca != first.ca
    assert DENIED in _refused_by_webhook(api)


def test_an_expired_certificate_fails_closed_until_a_restart_renews_it(
    webhook: server.WebhookServer, api: client.HttpApi
) -> None:
    port = webhook.port
    webhook.shutdown()
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=400)
    expired = server.WebhookServer(_settings(port, cert_days=30), api, clock=lambda: long_ago)
    try:
        expired.check(force_ca=True)
        expired.start()
        message = _refused_by_webhook(api)
        assert "failed calling webhook" in message and DENIED not in message
    finally:
        expired.shutdown()
    renewed = server.serve(_settings(port), api)
    try:
        assert DENIED in _refused_by_webhook(api)
    finally:
        renewed.shutdown()


def test_the_metax_operator_webhook_entry_point_serves_the_api_server(
    webhook: server.WebhookServer, api: client.HttpApi, control_plane: cluster.ControlPlane
) -> None:
    """The console script, as its own process on loopback (what a Deployment would run alone)."""
    port = webhook.port
    webhook.shutdown()  # idempotent: the previous test may have stopped it already
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig_path),
        "METAX_NAMESPACE": NAMESPACE,
        "METAX_WEBHOOK_HOST": "127.0.0.1",
        "METAX_WEBHOOK_PORT": str(port),
        "METAX_WEBHOOK_EXTRA_HOSTS": "127.0.0.1",
    }
    script = Path(sys.executable).parent / "metax-operator-webhook"
    process = subprocess.Popen([str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if f"serving on port {port}" in line:
                break
        assert DENIED in _refused_by_webhook(api)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        if process.stderr is not None:
            process.stderr.close()


def test_a_resource_claim_with_a_bad_metax_configuration_is_refused_naming_the_field(
    webhook: server.WebhookServer, api: client.HttpApi
) -> None:
    """R-DRA at admission: the chart's webhook sends claims that configure the MetaX driver (its CEL match
    condition), the core's `devices_spec_errors` refuses a bad one with the field; others pass untouched."""

    def claim(kind: str, name: str, parameters: dict[str, Any], driver: str = DRIVER) -> dict[str, Any]:
        devices = {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}],
            "config": [{"requests": ["gpus"], "opaque": {"driver": driver, "parameters": parameters}}],
        }
        spec = {"devices": devices} if kind == "ResourceClaim" else {"spec": {"devices": devices}}
        meta = {"name": name, "namespace": NAMESPACE}
        return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta, "spec": spec}

    bad = {"apiVersion": dra_claims.CONFIG_API_VERSION, "kind": dra_claims.CONFIG_KIND, "macaVersion": "2.18"}
    good = {**bad, "macaVersion": "maca-2.18"}
    for kind, field in (
        ("ResourceClaim", "spec.devices.config[0].opaque.parameters.macaVersion"),
        ("ResourceClaimTemplate", "spec.spec.devices.config[0].opaque.parameters.macaVersion"),
    ):
        with pytest.raises(
            ClusterError,
            match=rf'(?s)resourceclaims.gpu.metax-tech.com.*denied.*{re.escape(field)}: must look like "maca-2"',
        ):
            api.create(claim(kind, "bad", bad))
        api.create(claim(kind, "good", good))
        api.create(claim(kind, "other-driver", bad, driver="other.example.com"))  # not ours to judge
        for name in ("good", "other-driver"):
            api.delete("resource.k8s.io/v1", kind, name, NAMESPACE)


def test_the_firmware_fields_are_locked_while_a_node_flashes(
    webhook: server.WebhookServer, api: client.HttpApi, control_plane: cluster.ControlPlane
) -> None:
    """R-FW "no parameter changes while upgrading" (issue 41 item 4): while a node carries driver-manager's
    firmware.flashing label, the fields that decide what gets flashed are refused, naming the node; others pass."""
    _apply(api, _good())
    node = control_plane.node_names[0]
    flashing = {"metadata": {"labels": {labels.FIRMWARE_FLASHING: labels.TRUE}}}
    api.merge_patch("v1", "Node", node, flashing)
    try:
        for change, path in (
            ({"driver": {"payload": {"version": "2.19.0"}}}, "spec.driver.payload.version"),
            ({"driver": {"fwEnableVirt": True}}, "spec.driver.fwEnableVirt"),
        ):
            with pytest.raises(ClusterError) as refused:
                _apply(api, _merge(_good(), change))
            assert DENIED in str(refused.value)
            assert f"{path}: cannot be changed while firmware is being flashed (nodes: {node})" in str(refused.value)
        assert _current(api)["spec"]["driver"]["payload"]["version"] == VERSION
        paused = _apply(api, _merge(_good(), {"driver": {"upgradePolicy": {"pause": True}}}))
        assert paused["spec"]["driver"]["upgradePolicy"]["pause"] is True  # not a firmware field: passes
    finally:
        api.merge_patch("v1", "Node", node, {"metadata": {"labels": {labels.FIRMWARE_FLASHING: None}}})
    changed = _apply(api, _merge(_good(), {"driver": {"payload": {"version": "2.19.0"}}}))  # the flash is over
    assert changed["spec"]["driver"]["payload"]["version"] == "2.19.0"
    _apply(api, _good())
