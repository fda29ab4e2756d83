"""The test bed's registry (issue 39 item 1; R-RELEASE): Debian's docker-registry as `metax_dev.registry` starts it.

What the release tests and the e2e rely on, checked against the running registry and real clients:

- it refuses anonymous and wrong credentials and serves its own user (``GET /v2/`` 401/401/200);
- its certificate verifies against the harness's CA only: a client trusting the system's CAs refuses it;
- skopeo pushes with the containers-auth.json it writes (``--authfile``) and the cert dir (``--cert-dir``), and is
  refused without them; what the registry's API then serves is the digest skopeo computed for the image;
- the ``.dockerconfigjson`` of the pull secret and the auth file hold the same credentials, and the hosts.toml a
  node's containerd reads names the registry and a CA file that is the registry's CA (the node's pull itself:
  tests/e2e/test_product.py).
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomlkit

from metax_dev import registry as test_registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_registry.Registry]:
    with test_registry.started(tmp_path_factory.mktemp("registry")) as r:
        yield r


def test_only_its_own_user_is_served(registry: test_registry.Registry) -> None:
    assert registry.request("/v2/").status == 401
    assert registry.request("/v2/", credentials=(registry.username, registry.password + "x")).status == 401
    assert registry.request("/v2/", credentials=("someone", registry.password)).status == 401
    assert registry.request("/v2/", credentials=registry.credentials).status == 200


def test_its_certificate_verifies_against_the_harness_ca_only(registry: test_registry.Registry) -> None:
    address, port = registry.host.rsplit(":", 1)
    with pytest.raises(ssl.SSLCertVerificationError):
        ssl.get_server_certificate((address, int(port)), ca_certs="/etc/ssl/certs/ca-certificates.crt", timeout=5)
    assert ssl.get_server_certificate((address, int(port)), ca_certs=str(registry.ca_pem), timeout=5)


def _empty_image(tmp_path: Path) -> str:
    """A real (empty) OCI image made by umoci: ``oci:<layout>:v1``."""
    layout = tmp_path / "layout"
    subprocess.run(["umoci", "init", "--layout", str(layout)], check=True)
    subprocess.run(["umoci", "new", "--image", f"{layout}:v1"], check=True)
    return f"oci:{layout}:v1"


def _skopeo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=60, check=False)


def test_skopeo_pushes_with_the_auth_file_and_cert_dir_and_is_refused_without(
    registry: test_registry.Registry, tmp_path: Path
) -> None:
    source = _empty_image(tmp_path)
    destination = f"docker://{registry.reference('tests/empty', 'v1')}"
    anonymous = _skopeo("copy", "--quiet", "--dest-cert-dir", str(registry.cert_dir), source, destination)
    assert anonymous.returncode != 0 and "unauthorized" in anonymous.stderr.lower()
    untrusted = _skopeo(
        "copy", "--quiet", "--authfile", str(registry.auth_file(tmp_path / "auth.json")), source, destination
    )
    assert untrusted.returncode != 0 and "certificate" in untrusted.stderr.lower()
    digest_file = tmp_path / "digest"
    pushed = _skopeo(
        "copy",
        "--quiet",
        "--authfile",
        str(tmp_path / "auth.json"),
        "--dest-cert-dir",
        str(registry.cert_dir),
        "--digestfile",
        str(digest_file),
        source,
        destination,
    )
    assert pushed.returncode == 0, pushed.stderr
    assert registry.tags("tests/empty") == ["v1"]
    assert registry.manifest_digest("tests/empty", "v1") == digest_file.read_text().strip()


def test_the_pull_secret_and_the_auth_file_carry_the_same_credentials(
    registry: test_registry.Registry, tmp_path: Path
) -> None:
    secret = json.loads(registry.docker_config_json())["auths"][registry.host]
    assert base64.b64decode(secret["auth"]).decode() == f"{registry.username}:{registry.password}"
    written = registry.auth_file(tmp_path / "auth.json")
    assert json.loads(written.read_text())["auths"][registry.host] == secret
    assert written.stat().st_mode & 0o077 == 0  # a password: readable by its owner only


def test_the_containerd_hosts_file_trusts_the_registry_ca(registry: test_registry.Registry, tmp_path: Path) -> None:
    hosts = registry.write_containerd_hosts(tmp_path / "certs.d")
    assert hosts.parent.name == registry.host  # containerd looks up <config_path>/<host>/hosts.toml
    document = tomlkit.parse(hosts.read_text()).unwrap()
    assert document["server"] == registry.url
    entry = document["host"][registry.url]
    assert entry["capabilities"] == ["pull", "resolve"]
    assert Path(entry["ca"]).read_bytes() == registry.ca_pem.read_bytes()
