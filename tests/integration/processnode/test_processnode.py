"""The process node on the session control plane: pods bound by the real scheduler run as local processes.

Covers: the node registers itself Ready (no kwok annotation) with its Lease; a pod's container runs its command
from the virtualenv with the pod's env (values, ``$(VAR)``, fieldRef, configMapKeyRef, secretKeyRef) and its
ServiceAccount's own token (bound to the pod, renewed), so the real RBAC authorizer allows what its Role grants
and forbids the rest; its readiness probe (httpGet) makes it Ready (and NotReady while it fails) and the
EndpointSlice controller publishes its address; restartPolicy Always restarts a crashing container with a back-
off; Never/OnFailure end Succeeded or Failed (a Job's pod); a command that is not installed ends with StartError
(exit code 128) instead of hanging; a failing liveness probe (exec) restarts the container; deletion sends
SIGTERM, waits the grace period, sends SIGKILL and removes the pod; stopping a node leaves no process behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kube_client

from metax_core.errors import NotFound
from metax_dev.controlplane import cluster, network
from metax_dev.processnode import address
from metax_dev.processnode import node as processnode
from metax_dev.processnode.worker import PodWorker
from metax_k8s import client
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

PYTHON = Path(sys.executable).name  # found in the virtualenv's bin dir, like the product's console scripts


@pytest.fixture(scope="module")
def api(control_plane: cluster.ControlPlane) -> client.HttpApi:
    return client.HttpApi(client.api_client(control_plane.kubeconfig_path))


@pytest.fixture
def namespace(api: client.HttpApi, process_node: processnode.ProcessNode) -> Iterator[str]:
    name = f"pn-{os.urandom(4).hex()}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for("default ServiceAccount", lambda: api.get("v1", "ServiceAccount", "default", name))
    try:
        yield name
    finally:
        for pod in api.list("v1", "Pod", namespace=name).items:
            with contextlib.suppress(NotFound):
                api.delete("v1", "Pod", pod["metadata"]["name"], name)
        wait_for("pods gone", lambda: not api.list("v1", "Pod", namespace=name).items)
        api.delete("v1", "Namespace", name)


def pod(namespace: str, name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {processnode.LABEL: processnode.LABEL_VALUE},
            "tolerations": [{"key": processnode.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": containers,
            **spec,
        },
    }


def python(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "example.invalid/none:1",
        "command": [PYTHON, "-c", textwrap.dedent(script)],
        **extra,
    }


def get_pod(api: client.HttpApi, namespace: str, name: str) -> dict[str, Any]:
    return api.get("v1", "Pod", name, namespace)


def container_status(api: client.HttpApi, namespace: str, name: str) -> dict[str, Any]:
    statuses = (get_pod(api, namespace, name).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_the_node_is_ours_ready_and_heartbeating(api: client.HttpApi, process_node: processnode.ProcessNode) -> None:
    obj = api.get("v1", "Node", process_node.name)
    assert "kwok.x-k8s.io/node" not in (obj["metadata"].get("annotations") or {})
    assert condition(obj, "Ready") == "True"
    assert {"type": "InternalIP", "address": process_node.address} in obj["status"]["addresses"]
    lease = api.get("coordination.k8s.io/v1", "Lease", process_node.name, "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == process_node.name
    first = lease["spec"]["renewTime"]
    wait_for(
        "a renewed lease",
        lambda: (
            api.get("coordination.k8s.io/v1", "Lease", process_node.name, "kube-node-lease")["spec"]["renewTime"]
            != first
        ),
        timeout=30,
    )


SERVER = """
    import http.server, os, sys
    from metax_k8s import client
    from metax_core.errors import ClusterError
    api = client.HttpApi(client.api_client())
    me = api.get("v1", "Pod", os.environ["POD_NAME"], os.environ["POD_NAMESPACE"])
    print("as-sa: got my pod", me["metadata"]["uid"], flush=True)
    try:
        api.list("v1", "Secret", namespace=os.environ["POD_NAMESPACE"])
        print("as-sa: listed secrets", flush=True)
    except ClusterError as exc:
        print("as-sa: secrets refused:", exc.status, flush=True)
    for key in ("POD_NAME", "POD_UID", "NODE", "ACCOUNT", "POD_IP", "GREETING", "FROM_CM", "FROM_SECRET", "KUBECONFIG"):
        print(f"env {key}={os.environ.get(key)}", flush=True)
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if os.path.exists("ready") else 503)
            self.end_headers()
        def log_message(self, *args):
            pass
    open("ready", "w").close()
    http.server.HTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""


def _field(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def test_a_pod_runs_with_its_env_its_own_token_and_a_real_readiness_probe(
    api: client.HttpApi, namespace: str, process_node: processnode.ProcessNode
) -> None:
    port = network.free_port()
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": namespace}})
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    meta = {"name": "reader", "namespace": namespace}
    api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules})
    api.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "from-configmap"}})
    api.create({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"s": "from-secret"}})
    env = [
        {"name": "POD_NAME", "valueFrom": _field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": _field("metadata.namespace")},
        {"name": "POD_UID", "valueFrom": _field("metadata.uid")},
        {"name": "NODE", "valueFrom": _field("spec.nodeName")},
        {"name": "ACCOUNT", "valueFrom": _field("spec.serviceAccountName")},
        {"name": "POD_IP", "valueFrom": _field("status.podIP")},
        {"name": "PORT", "value": str(port)},
        {"name": "GREETING", "value": "hello on $(NODE)"},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "reader", "key": "k"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "reader", "key": "s"}}},
    ]
    probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
    container = python("server", SERVER, env=env, ports=[{"name": "http", "containerPort": port}], readinessProbe=probe)
    api.create(pod(namespace, "server", [container], serviceAccountName="reader"))
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "server", "namespace": namespace},
            "spec": {"selector": {"app": "server"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }
    )
    running = wait_for("Ready", lambda: condition(p := get_pod(api, namespace, "server"), "Ready") == "True" and p)
    assert running["status"]["phase"] == "Running" and running["status"]["podIP"] == process_node.address
    assert {c["type"] for c in running["status"]["conditions"]} >= {"PodScheduled", "Initialized", "ContainersReady"}
    status = running["status"]["containerStatuses"][0]
    assert status["started"] is True and status["restartCount"] == 0 and "running" in status["state"]
    log_path = process_node.log_path(namespace, "server", "server")
    assert log_path is not None
    text = log_path.read_text()
    uid = running["metadata"]["uid"]
    assert f"as-sa: got my pod {uid}" in text  # its own token, its Role
    assert "as-sa: secrets refused: 403" in text  # and nothing more
    for line in (
        f"env POD_UID={uid}",
        f"env NODE={process_node.name}",
        "env ACCOUNT=reader",
        f"env POD_IP={process_node.address}",
        f"env GREETING=hello on {process_node.name}",
        "env FROM_CM=from-configmap",
        "env FROM_SECRET=from-secret",
        "env KUBECONFIG=None",  # never the harness's admin credentials
    ):
        assert line in text
    selector = "kubernetes.io/service-name=server"
    endpoints = wait_for(
        "an EndpointSlice with the pod's address",
        lambda: [
            e
            for s in api.list(
                "discovery.k8s.io/v1", "EndpointSlice", namespace=namespace, label_selector=selector
            ).items
            for e in s.get("endpoints") or []
        ],
    )
    assert endpoints[0]["addresses"] == [process_node.address] and endpoints[0]["conditions"]["ready"] is True
    worker = process_node.worker(namespace, "server")
    assert worker is not None
    (worker.directory / "ready").unlink()  # the server now answers 503: three failed probes make it NotReady
    wait_for("NotReady", lambda: condition(get_pod(api, namespace, "server"), "Ready") == "False")
    assert container_status(api, namespace, "server")["restartCount"] == 0  # readiness never restarts
    (worker.directory / "ready").touch()
    wait_for("Ready again", lambda: condition(get_pod(api, namespace, "server"), "Ready") == "True")
    first = (worker.account_dir / "token").read_text()
    worker.renew_token()  # what happens at 80 % of the token's lifetime
    renewed = wait_for("a renewed token", lambda: (t := (worker.account_dir / "token").read_text()) != first and t)
    for token in (first, renewed):  # both are the pod's ServiceAccount's, bound to this pod
        review = api.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "metadata": {"name": "review"},
                "spec": {"token": token},
            }
        )
        assert review["status"]["user"]["username"] == f"system:serviceaccount:{namespace}:reader"
        assert review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]


def test_restart_always_restarts_a_crashing_container_with_a_back_off(api: client.HttpApi, namespace: str) -> None:
    api.create(pod(namespace, "crash", [python("crash", "import sys; print('bye'); sys.exit(3)")]))
    status = wait_for(
        "two restarts", lambda: (s := container_status(api, namespace, "crash")).get("restartCount", 0) >= 2 and s
    )
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert get_pod(api, namespace, "crash")["status"]["phase"] == "Running"
    waiting = wait_for(
        "back-off", lambda: (s := container_status(api, namespace, "crash"))["state"].get("waiting") and s
    )
    assert waiting["state"]["waiting"]["reason"] == "CrashLoopBackOff"


@pytest.mark.parametrize(
    ("policy", "script", "phase", "exit_code"),
    [
        ("Never", "print('done')", "Succeeded", 0),
        ("Never", "import sys; sys.exit(2)", "Failed", 2),
        (
            "OnFailure",
            "import os, sys; sys.exit(0 if os.path.exists('again') else open('again', 'w').close() or 1)",
            "Succeeded",
            0,
        ),
    ],
    ids=["never-ok", "never-fails", "onfailure-retries"],
)
def test_a_job_pod_ends_succeeded_or_failed(
    api: client.HttpApi, namespace: str, policy: str, script: str, phase: str, exit_code: int
) -> None:
    api.create(pod(namespace, "job", [python("job", script)], restartPolicy=policy))
    done = wait_for(
        "a final phase",
        lambda: (p := get_pod(api, namespace, "job"))["status"].get("phase") in ("Succeeded", "Failed") and p,
    )
    assert done["status"]["phase"] == phase
    status = done["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == exit_code
    assert status["restartCount"] == (1 if policy == "OnFailure" else 0)


def test_a_command_that_is_not_installed_fails_clearly(api: client.HttpApi, namespace: str) -> None:
    missing = {"name": "missing", "image": "r.example/missing:1", "command": ["no-such-metax-command"]}
    api.create(pod(namespace, "missing", [missing], restartPolicy="Never"))
    done = wait_for(
        "Failed", lambda: (p := get_pod(api, namespace, "missing"))["status"].get("phase") == "Failed" and p
    )
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 128 and terminated["reason"] == "StartError"
    assert "'no-such-metax-command' not found in" in terminated["message"]


def test_a_failing_liveness_probe_restarts_the_container(api: client.HttpApi, namespace: str) -> None:
    probe = {"exec": {"command": [PYTHON, "-c", "raise SystemExit(1)"]}, "periodSeconds": 1, "failureThreshold": 2}
    sleeper = python("sleeper", "import time; time.sleep(600)", livenessProbe=probe)
    api.create(pod(namespace, "sick", [sleeper], terminationGracePeriodSeconds=1))
    status = wait_for(
        "a restart", lambda: (s := container_status(api, namespace, "sick")).get("restartCount", 0) >= 1 and s
    )
    assert "liveness probe failed" in status["lastState"]["terminated"]["message"]


GRACEFUL = """
    import signal, sys, time
    def bye(*_):
        print("got SIGTERM", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    print("up", flush=True)
    time.sleep(600)
"""
STUBBORN = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("up", flush=True)
    time.sleep(600)
"""


def _pid(api: client.HttpApi, namespace: str, name: str, index: int = 0) -> int:
    statuses = get_pod(api, namespace, name)["status"].get("containerStatuses") or []
    container_id = statuses[index].get("containerID", "") if len(statuses) > index else ""
    return int(container_id.removeprefix("process://")) if container_id else 0


def _printed(worker: PodWorker, container: str, line: str) -> bool:
    """Whether the container printed ``line`` (a whole line: the log's start line quotes the command)."""
    return line in worker.log_path(container).read_text().splitlines()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_deletion_sigterm_then_grace_then_sigkill_then_the_pod_is_gone(
    api: client.HttpApi, namespace: str, process_node: processnode.ProcessNode
) -> None:
    containers = [python("graceful", GRACEFUL), python("stubborn", STUBBORN)]
    api.create(pod(namespace, "stop", containers, terminationGracePeriodSeconds=3))
    wait_for("both running", lambda: _pid(api, namespace, "stop", 0) and _pid(api, namespace, "stop", 1))
    pids = [_pid(api, namespace, "stop", 0), _pid(api, namespace, "stop", 1)]
    worker = process_node.worker(namespace, "stop")
    assert worker is not None
    # Each script prints "up" once its SIGTERM handling is set; the log's start line quotes the script, so only
    # a whole line "up" says the process got that far (before it, a SIGTERM would just kill it).
    wait_for("both handle SIGTERM", lambda: all(_printed(worker, c, "up") for c in ("graceful", "stubborn")))
    began = time.monotonic()
    api.delete("v1", "Pod", "stop", namespace)
    wait_for("pod gone", lambda: not api.list("v1", "Pod", namespace=namespace).items, timeout=30)
    took = time.monotonic() - began
    assert _printed(worker, "graceful", "got SIGTERM")
    assert took >= 3  # the stubborn container had its grace period before SIGKILL
    assert not any(_alive(p) for p in pids)


def test_stopping_a_node_leaves_no_process(
    api: client.HttpApi, control_plane: cluster.ControlPlane, tmp_path: Path, namespace: str
) -> None:
    extra = processnode.ProcessNode.for_control_plane(control_plane, tmp_path, name="process-node-extra")
    extra.start()
    try:
        spec = pod(namespace, "orphan", [python("orphan", STUBBORN)])
        spec["spec"]["nodeSelector"] = {"kubernetes.io/hostname": extra.name}
        api.create(spec)
        pid = wait_for("running", lambda: _pid(api, namespace, "orphan"))
    finally:
        extra.stop()
    assert not _alive(pid)
    with pytest.raises(NotFound):
        api.get("v1", "Node", extra.name)
    assert extra.address not in address.ours()
    with control_plane.api_client() as admin:  # no kubelet is left to finish the pod's deletion: force it
        kube_client.CoreV1Api(admin).delete_namespaced_pod("orphan", namespace, grace_period_seconds=0)


def test_a_pod_it_cannot_honour_fails_with_the_field_named(api: client.HttpApi, namespace: str) -> None:
    spec = pod(namespace, "init", [python("main", "print('never')")], restartPolicy="Never")
    spec["spec"]["initContainers"] = [python("init", "print('never either')")]
    api.create(spec)
    failed = wait_for("Failed", lambda: (p := get_pod(api, namespace, "init"))["status"].get("phase") == "Failed" and p)
    assert failed["status"]["reason"] == "UnsupportedPodSpec"
    assert "spec.initContainers are not supported" in failed["status"]["message"]
