"""`metax_k8s.connect`: the node agents' API connection without the `kubernetes` package (P8), against the
real API server (TLS, client certificates, ServiceAccount tokens) and on files (what it refuses, and says).

* the test control plane's kubeconfig (embedded CA and client certificate) gives a `Connection` that
  `HttpApi` reads and writes with;
* in-cluster: a real ServiceAccount token (TokenRequest) and the cluster CA in a ServiceAccount directory:
  the API server sees the ServiceAccount's user; a rotated token file is read again after the refresh time;
* kubeconfigs it cannot serve (exec plugin, basic auth) fall back to the `kubernetes` package's loader;
  malformed ones raise `ClusterError` naming the file and the field.
"""

from __future__ import annotations

import base64
import pathlib
import subprocess
import sys
import uuid

import pytest
import yaml
from kubernetes import client

from metax_core.errors import ClusterError
from metax_dev.controlplane import cluster as controlplane
from metax_k8s import client as metax_client
from metax_k8s import connect


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.integration
def test_kubeconfig_with_embedded_certificates(control_plane: controlplane.ControlPlane, kube_namespace: str) -> None:
    connection = connect.connect(control_plane.kubeconfig_path, environ={})
    assert isinstance(connection, connect.Connection)
    api = metax_client.HttpApi(connection)
    name = f"cm-{uuid.uuid4().hex[:6]}"
    api.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": kube_namespace}},
        field_manager="connect-test",
    )
    assert api.get("v1", "ConfigMap", name, kube_namespace)["metadata"]["name"] == name


@pytest.mark.integration
def test_in_cluster_token_and_ca(
    control_plane: controlplane.ControlPlane, kube_api: client.ApiClient, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(kube_namespace, {"metadata": {"name": "agent"}})

    def token() -> str:
        answer = core.create_namespaced_service_account_token("agent", kube_namespace, {"spec": {}})
        return str(answer.status.token)

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(control_plane.ca_path.read_bytes())
    (account / "token").write_text(token())
    server = control_plane.server_url.removeprefix("https://")
    host, port = server.rsplit(":", 1)
    clock = Clock()
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    connection = connect.connect(environ=env, service_account=account, clock=clock)
    assert isinstance(connection, connect.Connection)
    api = metax_client.HttpApi(connection)
    user = f"system:serviceaccount:{kube_namespace}:agent"
    with pytest.raises(ClusterError, match=f"forbidden.*{user}"):  # authenticated as the account; no RBAC granted
        api.get("v1", "Namespace", kube_namespace)

    (account / "token").write_text("not-a-token")  # rotated (to garbage): read again after the refresh time only
    with pytest.raises(ClusterError, match=user):
        api.get("v1", "Namespace", kube_namespace)
    clock.now += connect.TOKEN_REFRESH
    with pytest.raises(ClusterError, match="Unauthorized"):
        api.get("v1", "Namespace", kube_namespace)


def kubeconfig(
    tmp_path: pathlib.Path, user: dict[str, object], cluster: dict[str, object] | None = None
) -> pathlib.Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def test_kubeconfig_it_cannot_serve_falls_back_to_the_kubernetes_package(tmp_path: pathlib.Path) -> None:
    path = kubeconfig(tmp_path, {"username": "admin", "password": "secret"})
    with pytest.raises(connect.Unsupported, match="password"):
        connect.from_kubeconfig(path, Clock())
    fallback = connect.connect(path, environ={})
    assert not isinstance(fallback, connect.Connection)
    assert fallback.configuration.host == "https://127.0.0.1:1"


def test_without_the_kubeconfig_extra_the_fallback_names_it(tmp_path: pathlib.Path) -> None:
    """The images do not carry the `kubernetes` package (docs/images.md): a kubeconfig only its loader reads
    is refused with the extra to install, in a process where the package cannot be imported."""
    path = kubeconfig(tmp_path, {"username": "admin", "password": "secret"})
    script = (
        "import sys; sys.modules['kubernetes'] = None\n"
        "from metax_core.errors import ClusterError\n"
        "from metax_k8s import connect\n"
        "try:\n"
        f"    connect.connect({str(path)!r}, environ={{}})\n"
        "except ClusterError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert metax_client.KUBECONFIG_EXTRA in out
    assert str(path) in out and "exec plugin or auth provider" in out


def test_token_kubeconfig_and_plain_http(tmp_path: pathlib.Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    connection = connect.from_kubeconfig(
        kubeconfig(tmp_path, {"tokenFile": "token"}, {"server": "http://127.0.0.1:8080/"}), Clock()
    )
    assert connection.configuration.host == "http://127.0.0.1:8080"
    assert connection.configuration.auth_settings()["BearerToken"]["value"] == "Bearer abc"


@pytest.mark.parametrize(
    ("user", "cluster", "message"),
    [
        ({}, {"certificate-authority-data": "%%%"}, "base64 data"),
        (
            {"client-certificate-data": base64.b64encode(b"x").decode()},
            None,
            "a client certificate needs both client-certificate and client-key",
        ),
        ({}, {"server": ""}, "cluster 'k' has no server"),
        ({"client-certificate": "missing.crt", "client-key": "missing.key"}, None, "TLS: .*No such file"),
    ],
)
def test_malformed_kubeconfig_is_named(
    tmp_path: pathlib.Path, user: dict[str, object], cluster: dict[str, object] | None, message: str
) -> None:
    path = kubeconfig(tmp_path, user, {"server": "https://127.0.0.1:1", **(cluster or {})})
    with pytest.raises(ClusterError, match=f"kubeconfig {path}: {message}"):
        connect.from_kubeconfig(path, Clock())


def test_missing_context_and_in_cluster_without_port(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("current-context: nowhere\ncontexts: []\n")
    with pytest.raises(ClusterError, match="contexts: no entry named 'nowhere'"):
        connect.connect(path, environ={})
    with pytest.raises(ClusterError, match="KUBERNETES_SERVICE_PORT must be set"):
        connect.connect(environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, service_account=tmp_path)


def test_agents_and_operator_never_import_the_kubernetes_package(tmp_path: pathlib.Path) -> None:
    """Building every node agent's and the operator's cluster ports loads no module of `kubernetes` (P8, P3)."""
    (tmp_path / "token").write_text("abc")
    path = kubeconfig(
        tmp_path, {"tokenFile": "token"}, {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}
    )
    code = (
        "import sys\n"
        "from services._agent import cluster\n"
        "from services.gpu_device import bootstrap\n"
        "cluster.production('gpu-label', 'n')\n"
        "bootstrap.RECIPE.cluster_ports(bootstrap.RECIPE.component, 'n')\n"
        "from services.operator import bootstrap as operator, settings\n"
        "operator.production_api(settings.from_env())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"KUBECONFIG": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        cwd=pathlib.Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
