"""The loopback test control plane is a real, working Kubernetes cluster.

Why this module exists: every other integration and end-to-end test trusts this control
plane. These tests prove that trust: the API server answers and enforces RBAC, the
controller-manager, scheduler and kwok turn a Deployment into Running pods on kwok nodes,
an API server restart keeps the data, and a 100-node kwok cluster comes up quickly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from metax_dev.controlplane import build, cluster
from metax_dev.controlplane import nodes as kwok_nodes
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def _name(metadata: client.V1ObjectMeta | None) -> str:
    assert metadata is not None and metadata.name is not None
    return metadata.name


def _node_ready(node: client.V1Node) -> bool:
    conditions = node.status.conditions if node.status is not None else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def _config_map(name: str, value: str) -> client.V1ConfigMap:
    return client.V1ConfigMap.model_validate({"metadata": {"name": name}, "data": {"value": value}})


def _token_client(plane: cluster.ControlPlane, token: str) -> client.ApiClient:
    configuration = client.Configuration(
        host=plane.server_url,
        ssl_ca_cert=str(plane.ca_path),
        api_key={"authorization": f"Bearer {token}"},
    )
    return client.ApiClient(configuration)


def test_api_server_answers_with_the_built_version_and_kwok_nodes(
    control_plane: cluster.ControlPlane, kube_api: client.ApiClient
) -> None:
    version = client.VersionApi(kube_api).get_code()
    assert version.git_version == build.module_versions()["kubernetes"]
    assert control_plane.server_url.startswith("https://127.0.0.1:")
    assert control_plane.kubeconfig_path.is_file()

    nodes = client.CoreV1Api(kube_api).list_node(
        label_selector=f"{kwok_nodes.KWOK_NODE_LABEL}={kwok_nodes.KWOK_NODE_LABEL_VALUE}"
    )
    by_name = {_name(n.metadata): n for n in nodes.items}
    session_nodes = control_plane.node_names[: control_plane.initial_nodes]
    assert len(session_nodes) == control_plane.initial_nodes
    assert set(session_nodes) <= set(by_name)
    for name in session_nodes:
        node = by_name[name]
        assert node.metadata is not None and node.status is not None
        assert (node.metadata.annotations or {})[
            kwok_nodes.KWOK_NODE_ANNOTATION
        ] == kwok_nodes.KWOK_NODE_ANNOTATION_VALUE
        assert (node.status.allocatable or {})["cpu"] == "32"
        assert (node.status.allocatable or {})["pods"] == "110"
        assert _node_ready(node)


def test_rbac_forbids_an_unprivileged_service_account(
    control_plane: cluster.ControlPlane, kube_api: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(
        kube_namespace, client.V1ServiceAccount.model_validate({"metadata": {"name": "nobody"}})
    )
    review = core.create_namespaced_service_account_token(
        "nobody",
        kube_namespace,
        client.AuthenticationV1TokenRequest.model_validate({"spec": {"expirationSeconds": 600}}),
    )
    assert review.status is not None and review.status.token
    token = review.status.token

    with _token_client(control_plane, token) as unprivileged:
        as_nobody = client.CoreV1Api(unprivileged)
        with pytest.raises(ApiException) as forbidden:
            as_nobody.list_node()
        assert forbidden.value.status == 403
        assert f"system:serviceaccount:{kube_namespace}:nobody" in str(forbidden.value.body)

        with pytest.raises(ApiException) as no_pods:
            as_nobody.list_namespaced_pod(kube_namespace)
        assert no_pods.value.status == 403

        # The token is valid, and RBAC grants are honoured: a Role makes pods readable.
        rbac = client.RbacAuthorizationV1Api(kube_api)
        rbac.create_namespaced_role(
            kube_namespace,
            client.V1Role.model_validate(
                {
                    "metadata": {"name": "pod-reader"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
                }
            ),
        )
        rbac.create_namespaced_role_binding(
            kube_namespace,
            client.V1RoleBinding.model_validate(
                {
                    "metadata": {"name": "nobody-reads-pods"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "pod-reader",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": kube_namespace}],
                }
            ),
        )

        def can_list_pods() -> bool:
            try:
                as_nobody.list_namespaced_pod(kube_namespace)
            except ApiException as exc:
                if exc.status != 403:
                    raise
                return False
            return True

        wait_for("can list pods", can_list_pods, timeout=20)
        with pytest.raises(ApiException) as still_forbidden:
            as_nobody.list_node()
        assert still_forbidden.value.status == 403


def _run_sleepers(api: client.ApiClient, namespace: str, replicas: int) -> list[client.V1Pod]:
    """A Deployment of ``replicas`` pause pods (kwok only pretends to run them); its pods once all are Running."""
    labels = {"app": "sleeper"}
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        client.V1Deployment.model_validate(
            {
                "metadata": {"name": "sleeper"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "sleeper",
                                    # Never pulled: kwok only pretends to run containers.
                                    "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                }
                            ]
                        },
                    },
                },
            }
        ),
    )

    def running_pods() -> list[client.V1Pod] | None:
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app=sleeper").items
        running = [
            p
            for p in pods
            if p.status is not None and p.status.phase == "Running" and p.spec is not None and p.spec.node_name
        ]
        return running if len(running) == replicas else None

    pods: list[client.V1Pod] = wait_for("running pods", running_pods, timeout=90)
    return pods


def test_deployment_pods_are_scheduled_onto_kwok_nodes_and_run(
    control_plane: cluster.ControlPlane, kube_api: client.ApiClient, kube_namespace: str
) -> None:
    replicas = 4
    apps = client.AppsV1Api(kube_api)
    pods = _run_sleepers(kube_api, kube_namespace, replicas)
    for pod in pods:
        assert pod.spec is not None and pod.status is not None
        assert pod.spec.node_name in control_plane.node_names
        ready = [c for c in pod.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert pod.status.pod_ip  # kwok assigned an address from its pod CIDR

    def available() -> bool:
        status = apps.read_namespaced_deployment_status("sleeper", kube_namespace).status
        return status is not None and status.available_replicas == replicas

    wait_for("available", available, timeout=60)


@pytest.mark.restarts_apiserver
def test_restart_apiserver_keeps_data_and_address(
    control_plane: cluster.ControlPlane,
    kube_namespace: str,
    record_timing: Callable[[str, float], None],
) -> None:
    value = uuid.uuid4().hex
    with control_plane.api_client() as before:
        client.CoreV1Api(before).create_namespaced_config_map(kube_namespace, _config_map("survivor", value))
    url = control_plane.server_url

    seconds = control_plane.restart_apiserver()
    record_timing("kube-apiserver restart", seconds)

    assert control_plane.server_url == url
    with control_plane.api_client() as after:
        core = client.CoreV1Api(after)
        config_map = core.read_namespaced_config_map("survivor", kube_namespace)
        assert config_map.data == {"value": value}
        core.create_namespaced_config_map(kube_namespace, _config_map("newcomer", "x"))
        names = {_name(n.metadata) for n in core.list_node().items}
        assert set(control_plane.node_names) <= names


@pytest.mark.restarts_apiserver
def test_kwok_and_the_controllers_started_again_keep_the_nodes_and_run_new_pods(
    control_plane: cluster.ControlPlane,
    kube_api: client.ApiClient,
    kube_namespace: str,
    record_timing: Callable[[str, float], None],
) -> None:
    control_plane.restart_apiserver()
    assert control_plane.controllers_behind
    leases = client.CoordinationV1Api(kube_api)

    def holders() -> dict[str, str | None]:
        return {
            n: leases.read_namespaced_lease(n, "kube-node-lease").spec.holder_identity  # type: ignore[union-attr]
            for n in control_plane.node_names
        }

    old = holders()
    record_timing("kwok and controllers started again", control_plane.restart_controllers())
    assert not control_plane.controllers_behind
    # The new kwok holds every node's Lease at once (it does not wait out the old kwok's) and the nodes stay Ready.
    wait_for(
        "the new kwok holding the nodes' Leases",
        lambda: all(h and h not in old.values() for h in holders().values()),
        timeout=30,
    )
    nodes = client.CoreV1Api(kube_api).list_node().items
    assert all(_node_ready(n) for n in nodes if _name(n.metadata) in control_plane.node_names)
    # The new controller-manager (ReplicaSets), scheduler and kwok turn a new Deployment into Running pods.
    assert len(_run_sleepers(kube_api, kube_namespace, 2)) == 2


def test_a_hundred_node_kwok_cluster_comes_up(
    control_plane: cluster.ControlPlane, record_timing: Callable[[str, float], None]
) -> None:
    # A cluster of its own, so the session's cluster keeps its small, known node set.
    started = time.monotonic()
    with cluster.ControlPlane(nodes=100, bin_dir=control_plane.bin_dir) as big:
        up = time.monotonic() - started
        record_timing("100-node cluster: first usable API", big.timings.first_api or 0.0)
        record_timing("100-node cluster: 100 nodes Ready after API", big.timings.nodes_ready or 0.0)
        record_timing("100-node cluster: start to all ready", up)
        print(f"100-node kwok cluster up in {up:.1f}s ({big.timings.summary()})")

        with big.api_client() as api:
            nodes = client.CoreV1Api(api).list_node().items
        assert len(nodes) == 100
        assert all(_node_ready(n) for n in nodes)
    assert big.running is False
