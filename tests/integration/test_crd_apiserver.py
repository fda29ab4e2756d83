"""The generated ClusterOperator CRD as the real kube-apiserver enforces it (integration only).

The schema parts the in-memory server also enforces (defaults, enums, int-or-string, unknown fields) are
in test_objects.py for both adapters; here is what only the real server does: it accepts the CRD
as structural and its CEL rules as well-typed, evaluates the rules (the object's name, the exporter port,
the last rollout step), stores status through the subresource with the Table 3.16 schema, and prints the
columns ``kubectl get mxco`` shows. Objects are written with ``dryRun=All`` where possible, so the
session's real ``cluster-operator`` (if another test made one) is left alone.
(The file is not named test_crd.py: tests/k8s/test_crd.py has that module name.)
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from metax_core import wording
from metax_core.cluster import status as cluster_status
from metax_core.errors import ClusterError, InvalidSpec
from metax_core.node import uninstall
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_k8s import client, crd, objects
from tests.support.cluster import wait_served

pytestmark = pytest.mark.integration

API = f"{spec.API_GROUP}/{spec.API_VERSION}"


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    http = client.HttpApi(client.api_client(control_plane.kubeconfig_path))
    installed = http.apply(crd.crd(), field_manager="crd-tests", force=True)
    assert installed["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == crd.openapi_schema()
    wait_served(http, API, spec.KIND)
    return http


def co(body: dict[str, Any], name: str = spec.OBJECT_NAME) -> dict[str, Any]:
    return {"apiVersion": API, "kind": spec.KIND, "metadata": {"name": name}, "spec": body}


def dry_apply(api: client.HttpApi, obj: dict[str, Any]) -> dict[str, Any]:
    return api.apply(obj, field_manager="crd-tests", dry_run=True)


def test_the_crd_is_established_with_its_names(api: client.HttpApi) -> None:
    stored = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd.NAME)
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    assert stored["status"]["acceptedNames"]["shortNames"] == ["mxco"]
    assert api.resource(API, spec.KIND).namespaced is False


def test_only_the_one_name_is_accepted(api: client.HttpApi) -> None:
    with pytest.raises(ClusterError, match="metadata.name must be cluster-operator") as caught:
        dry_apply(api, co({}, name="my-operator"))
    assert caught.value.status == 422
    assert dry_apply(api, co({}))["metadata"]["name"] == "cluster-operator"


def test_exporter_port_only_with_node_port_or_load_balancer(api: client.HttpApi) -> None:
    with pytest.raises(
        ClusterError, match=r"spec\.exporter\.service\.port: .*only used when type is NodePort or LoadBalancer"
    ):
        dry_apply(api, co({"exporter": {"service": {"type": "ClusterIP", "port": 9400}}}))
    accepted = dry_apply(api, co({"exporter": {"service": {"type": "NodePort", "port": 30400}}}))
    assert accepted["spec"]["exporter"]["service"] == {"type": "NodePort", "port": 30400}
    with pytest.raises(ClusterError, match=r"spec\.exporter\.service\.port.*less than or equal to 65535"):
        dry_apply(api, co({"exporter": {"service": {"type": "NodePort", "port": 70000}}}))


def test_any_port_is_a_node_port_for_the_crd_and_gpus_takes_one_integer(api: client.HttpApi) -> None:
    """Issue 20: the cluster's --service-node-port-range decides node ports; ``--set …gpus=1`` gives 1."""
    accepted = dry_apply(api, co({"exporter": {"service": {"type": "NodePort", "port": 80}}}))
    assert accepted["spec"]["exporter"]["service"]["port"] == 80
    entry = {"nodeName": "gpu-.*", "gpus": 1}
    assert dry_apply(api, co({"vfioManager": {"vfioConfig": [entry]}}))["spec"]["vfioManager"]["vfioConfig"] == [entry]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"gpuDevice": {"deploy": "false"}}, "spec.gpuDevice.deploy"),
        ({"gpuDevice": {"healthyInterval": "9"}}, "spec.gpuDevice.healthyInterval"),
        ({"driver": {"upgradePolicy": {"maxParallel": "2"}}}, "spec.driver.upgradePolicy.maxParallel"),
    ],
)
def test_the_object_stays_strict_where_chart_values_are_lenient(api: client.HttpApi, body: Any, path: str) -> None:
    """Chart values' strings become booleans and integers in the chart (templates/_values.tpl); the object itself
    keeps its types, so the API server refuses a string there, as the validator does (docs/configuration.md)."""
    with pytest.raises(ClusterError, match=re.escape(path)):
        dry_apply(api, co(body))
    with pytest.raises(InvalidSpec, match=re.escape(path.removeprefix("spec."))):
        validation.parse(co({"driver": {"payload": {"version": "1.0.0"}}, **body}))


def test_an_enabled_rollout_needs_steps_ending_at_100_percent(api: client.HttpApi) -> None:
    with pytest.raises(ClusterError, match="must list at least one step"):
        dry_apply(api, co({"driver": {"upgradePolicy": {"enableRollout": True}}}))
    steps = [{"replicas": 1}, {"replicas": "50%"}]
    with pytest.raises(ClusterError, match=r'spec\.driver\.upgradePolicy\.upgradeSteps: .*last step .* "100%"'):
        dry_apply(api, co({"driver": {"upgradePolicy": {"enableRollout": True, "upgradeSteps": steps}}}))
    accepted = dry_apply(
        api, co({"driver": {"upgradePolicy": {"enableRollout": True, "upgradeSteps": [*steps, {"replicas": "100%"}]}}})
    )
    assert [s["toleration"] for s in accepted["spec"]["driver"]["upgradePolicy"]["upgradeSteps"]] == ["0%", "0%", "0%"]
    # Disabled rollouts may keep unfinished steps (an administrator edits them before enabling).
    assert dry_apply(api, co({"driver": {"upgradePolicy": {"upgradeSteps": steps}}}))


def test_pause_duration_accepts_milliseconds_and_durations(api: client.HttpApi) -> None:
    steps = [{"replicas": 1, "pauseDuration": 10000}, {"replicas": 2, "pauseDuration": "10s"}, {"replicas": "100%"}]
    accepted = dry_apply(api, co({"driver": {"upgradePolicy": {"upgradeSteps": steps}}}))
    assert [s.get("pauseDuration") for s in accepted["spec"]["driver"]["upgradePolicy"]["upgradeSteps"]] == [
        10000,
        "10s",
        None,
    ]
    with pytest.raises(ClusterError, match=r"pauseDuration.*should match"):
        dry_apply(
            api, co({"driver": {"upgradePolicy": {"upgradeSteps": [{"replicas": 1, "pauseDuration": "ten seconds"}]}}})
        )


@pytest.fixture
def stored(api: client.HttpApi) -> Iterator[dict[str, Any]]:
    """The real cluster-operator: ours if nobody made one, deleted afterwards only if ours."""
    existing = objects.K8sObjects(api).get(API, spec.KIND, spec.OBJECT_NAME)
    created = existing is None
    current = api.apply(co({}), field_manager="crd-tests") if created else existing
    assert current is not None
    yield current
    if created:
        api.delete(API, spec.KIND, spec.OBJECT_NAME)


def test_status_goes_through_the_subresource_with_the_rollout_schema(
    api: client.HttpApi, stored: dict[str, Any]
) -> None:
    moment = dt.datetime(2024, 5, 1, 8, 0, 0, tzinfo=dt.UTC)
    upgrade = rollout_status.UpgradeStatus(
        upgrading=True,
        phase=rollout_status.Phase.PROGRESSING,
        conditions=(
            rollout_status.Condition(
                rollout_status.ConditionType.PROGRESSING,
                rollout_status.ConditionStatus.TRUE,
                moment,
                rollout_status.Reason.STEP_UPGRADING,
                "step 2 of 3",
            ),
        ),
        status=rollout_status.StepStatus(
            current_step_index=2, current_step_state=rollout_status.StepState.STEP_UPGRADE, recheck_time=moment
        ),
    )
    status = {
        "phase": "Progressing",
        "readyNodes": 2,
        "totalNodes": 3,
        "upgradeStatus": rollout_status.to_document(upgrade),
    }
    body = {"apiVersion": API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "status": status}
    preview = api.apply(body, field_manager="crd-tests-status", subresource="status", force=True, dry_run=True)
    assert preview["status"] == status
    assert rollout_status.from_document(preview["status"]["upgradeStatus"]) == upgrade
    assert preview["spec"] == stored["spec"]
    with pytest.raises(ClusterError, match=r"status\.readyNodes"):
        api.apply(
            {**body, "status": {"readyNodes": "two"}},
            field_manager="crd-tests-status",
            subresource="status",
            force=True,
            dry_run=True,
        )


@pytest.mark.parametrize("nodes", [1000, 5000])
def test_the_uninstall_condition_of_a_fleet_that_never_answers_is_accepted(
    api: client.HttpApi, stored: dict[str, Any], nodes: int
) -> None:
    """What the finalizer writes when no node answers its uninstall (R-INSTALL): at 1,000 nodes the message named
    every node, the API server refused the status (the condition message's maxLength), and the uninstall never
    finished. Built by the writer's own functions; a message past the limit anyway is cut by the last of them."""
    everything = frozenset({"container-runtime", "driver", "gpu-device", "gpu-label", "maca", "vfio-manager"})
    undos = [uninstall.NodeUndo(f"kwok-node-{i}", everything) for i in range(nodes)]
    decision = uninstall.finalize(undos, "uid", waited=180, timeout=180)
    moment = dt.datetime(2024, 5, 1, 8, 0, 0, tzinfo=dt.UTC)
    conditions = [
        cluster_status.condition_document(
            cluster_status.Condition("Uninstalling", "True", uninstall.INCOMPLETE_REASON, decision.message, moment, 1)
        ),
        cluster_status.condition_document(cluster_status.Condition("Long", "True", "Why", "z" * 40_000, moment, 1)),
    ]
    body = {"apiVersion": API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}}
    preview = api.apply(
        {**body, "status": {"conditions": conditions}},
        field_manager="crd-tests-status",
        subresource="status",
        force=True,
        dry_run=True,
    )
    said = {c["type"]: c["message"] for c in preview["status"]["conditions"]}
    assert said["Uninstalling"] == decision.message and f"and {nodes - 10:,} more" in said["Uninstalling"]
    assert said["Long"].endswith(wording.CUT)


def test_printer_columns(api: client.HttpApi, stored: dict[str, Any]) -> None:
    http = api.client.rest_client.pool_manager
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    for setting in api.client.configuration.auth_settings().values():
        headers[setting["key"]] = setting["value"]
    response = http.request("GET", f"{api.client.configuration.host}/apis/{API}/{crd.PLURAL}", headers=headers)
    assert response.status == 200, response.data
    table = json.loads(response.data)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Progressing",
        "Driver Rollout",
        "Phase",
        "Step",
        "Nodes",
        "Age",
    ]
    assert [row["cells"][0] for row in table["rows"]] == [spec.OBJECT_NAME]
