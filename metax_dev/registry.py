"""An OCI registry for the test bed: Debian's ``docker-registry`` (the CNCF distribution registry) on loopback, with
TLS from a throw-away CA and one htpasswd user.

Why this module exists: the release path (images pushed with skopeo, the chart pushed and installed with ``helm``
over ``oci://``, a node's containerd pulling with an imagePullSecret) is only tested honestly against a real
registry, one that refuses anonymous and wrong credentials and serves a certificate clients must verify
(ARCHITECTURE.md, "Where the next pieces go"). Like the control plane it is a real peer started by the harness:
:func:`started` runs one on a free 127.0.0.1 port with its own storage directory and logs, waits until it serves
(``GET /v2/`` answers 401 without credentials and 200 with them, over TLS checked against its CA) and stops it.

What clients need comes from the running :class:`Registry`: a containers-auth.json (`Registry.auth_file`, read by
skopeo ``--authfile`` and helm ``--registry-config``), the ``.dockerconfigjson`` of an imagePullSecret
(`Registry.docker_config_json`), a cert dir holding only ``ca.crt`` (skopeo ``--cert-dir``), containerd's
``certs.d/<host>/hosts.toml`` (`hosts_toml`, `Registry.write_containerd_hosts`), and, for assertions, the registry's
own HTTP API (`Registry.catalog`, `Registry.tags`, `Registry.manifest`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import http.client
import json
import logging
import secrets
import shutil
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import bcrypt
import tomlkit
import yaml

from metax_dev.controlplane import errors, network, pki, processes

logger = logging.getLogger(__name__)

BINARY: Final = Path("/usr/bin/docker-registry")
"""Debian's ``docker-registry`` package (``./run`` installs it; its own service never starts)."""
USERNAME: Final = "metax-test"
REALM: Final = "metax-test-registry"
BCRYPT_COST: Final = 4
"""The lowest cost the registry's bcrypt accepts: it checks the password on every request, and this one is
thrown away with the registry."""

OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST: Final = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES: Final = (OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST)
"""What a manifest request accepts: without the index types the registry answers for an index with the manifest of
one platform (another digest) instead."""

Credentials = tuple[str, str]


class RegistryError(errors.ControlPlaneError):
    """The test registry could not be started, or answered a request with an error."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    """Header names in lower case."""
    body: bytes


@dataclass(frozen=True)
class Manifest:
    """A manifest as the registry serves it: its media type, the digest the registry stores, its bytes."""

    media_type: str
    digest: str
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def hosts_toml(host: str, ca: Path) -> str:
    """containerd's ``certs.d/<host>/hosts.toml`` for a registry at ``host`` (``HOST:PORT``): pull and resolve from
    it over HTTPS, trusting the CA at ``ca`` (a path the containerd reading it opens)."""
    server = f"https://{host}"
    entry = tomlkit.table()
    entry["capabilities"] = ["pull", "resolve"]
    entry["ca"] = str(ca)
    hosts = tomlkit.table(is_super_table=True)
    hosts[server] = entry
    document = tomlkit.document()
    document["server"] = server
    document["host"] = hosts
    return tomlkit.dumps(document)


def auths(host: str, credentials: Credentials) -> dict[str, object]:
    """The ``{"auths": {host: {...}}}`` document of containers-auth.json and of a ``.dockerconfigjson``."""
    username, password = credentials
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {host: {"username": username, "password": password, "auth": token}}}


def htpasswd_line(username: str, password: str) -> str:
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=BCRYPT_COST)).decode()
    return f"{username}:{digest}\n"


@dataclass(frozen=True)
class Registry:
    """A running test registry."""

    host: str
    """``127.0.0.1:PORT``: what image references and ``oci://`` chart references start with."""
    username: str
    password: str
    ca_pem: Path
    """The CA its serving certificate is signed by (PEM)."""
    cert_dir: Path
    """A directory holding only ``ca.crt``: skopeo's ``--cert-dir``/``--dest-cert-dir``, docker's ``certs.d/<host>``."""
    directory: Path
    log_path: Path
    startup_seconds: float
    """From starting the process to its first authenticated 200 on ``/v2/``."""

    @property
    def url(self) -> str:
        return f"https://{self.host}"

    @property
    def credentials(self) -> Credentials:
        return (self.username, self.password)

    def reference(self, repository: str, tag: str) -> str:
        """``HOST:PORT/<repository>:<tag>``."""
        return f"{self.host}/{repository}:{tag}"

    def auth_file(self, path: Path) -> Path:
        """Write a containers-auth.json for this registry at ``path`` (skopeo ``--authfile``, helm
        ``--registry-config``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(auths(self.host, self.credentials), indent=2) + "\n")
        path.chmod(0o600)
        return path

    def docker_config_json(self) -> str:
        """The ``.dockerconfigjson`` a ``kubernetes.io/dockerconfigjson`` Secret carries for this registry (the Secret
        an imagePullSecrets entry names)."""
        return json.dumps(auths(self.host, self.credentials))

    def hosts_toml(self) -> str:
        """containerd's ``hosts.toml`` for this registry, trusting `ca_pem`."""
        return hosts_toml(self.host, self.ca_pem)

    def write_containerd_hosts(self, config_dir: Path) -> Path:
        """``<config_dir>/<host>/hosts.toml`` and the CA beside it (``ca.crt``), for a containerd whose registry
        ``config_path`` (or ``ctr --hosts-dir``) is ``config_dir``. Returns the hosts.toml."""
        directory = config_dir / self.host
        directory.mkdir(parents=True, exist_ok=True)
        ca = directory / "ca.crt"
        shutil.copyfile(self.ca_pem, ca)
        path = directory / "hosts.toml"
        path.write_text(hosts_toml(self.host, ca))
        return path

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_pem))

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        credentials: Credentials | None = None,
        accept: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> Response:
        """One HTTPS request to the registry's API, verified against its CA; anonymous without ``credentials``."""
        address, port = self.host.rsplit(":", 1)
        connection = http.client.HTTPSConnection(address, int(port), context=self.ssl_context(), timeout=timeout)
        headers = {"Accept": ", ".join(accept)} if accept else {}
        if credentials is not None:
            token = base64.b64encode(":".join(credentials).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        try:
            connection.request(method, path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            return Response(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
        finally:
            connection.close()

    def _get_json(self, path: str) -> object:
        response = self.request(path, credentials=self.credentials)
        if response.status != 200:
            raise RegistryError(f"GET {path}: HTTP {response.status}: {response.body[:500]!r}")
        return json.loads(response.body)

    def catalog(self) -> list[str]:
        """The repositories the registry holds (``/v2/_catalog``)."""
        document = self._get_json("/v2/_catalog")
        assert isinstance(document, dict)
        return list(document.get("repositories") or [])

    def tags(self, repository: str) -> list[str]:
        document = self._get_json(f"/v2/{repository}/tags/list")
        assert isinstance(document, dict)
        return list(document.get("tags") or [])

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest or index stored for a tag or digest, as the registry serves it to a client that accepts every
        manifest type."""
        path = f"/v2/{repository}/manifests/{reference}"
        response = self.request(path, credentials=self.credentials, accept=MANIFEST_TYPES)
        if response.status != 200:
            raise RegistryError(f"GET {path}: HTTP {response.status}: {response.body[:500]!r}")
        digest = response.headers.get("docker-content-digest", "")
        computed = "sha256:" + hashlib.sha256(response.body).hexdigest()
        if digest != computed:
            raise RegistryError(f"GET {path}: the registry says {digest!r}, the body's digest is {computed}")
        return Manifest(response.headers.get("content-type", ""), digest, response.body)

    def manifest_digest(self, repository: str, reference: str) -> str:
        """The digest the registry stores for ``reference`` (a tag or a digest) in ``repository``."""
        return self.manifest(repository, reference).digest


def config(*, port: int, storage: Path, tls: pki.KeyPair, htpasswd: Path) -> dict[str, object]:
    """The registry's configuration (distribution's format, version 0.1)."""
    return {
        "version": "0.1",
        "log": {"level": "info", "formatter": "text", "fields": {"service": "registry"}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {
            "addr": f"{network.LOOPBACK}:{port}",
            "secret": secrets.token_hex(16),
            "tls": {"certificate": str(tls.cert), "key": str(tls.key)},
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
        "auth": {"htpasswd": {"realm": REALM, "path": str(htpasswd)}},
    }


@contextlib.contextmanager
def started(directory: Path, *, binary: Path = BINARY, timeout: float = 30.0) -> Iterator[Registry]:
    """A registry serving from ``directory`` (its CA, certificates, htpasswd, config, storage and log), on a free
    loopback port, until the block ends."""
    if not binary.is_file():
        raise RegistryError(f"{binary} is missing: install Debian's docker-registry (`./run test` does)")
    directory.mkdir(parents=True, exist_ok=True)
    authority = pki.Pki(directory / "pki")
    serving = authority.issue(
        "registry", network.LOOPBACK, dns_names=["localhost"], ips=[network.LOOPBACK], server=True
    )
    cert_dir = directory / "certs"
    cert_dir.mkdir(exist_ok=True)
    shutil.copyfile(authority.ca.cert, cert_dir / "ca.crt")
    password = secrets.token_urlsafe(18)
    htpasswd = directory / "htpasswd"
    htpasswd.write_text(htpasswd_line(USERNAME, password))
    port = network.free_port()
    config_path = directory / "config.yml"
    settings = config(port=port, storage=directory / "storage", tls=serving, htpasswd=htpasswd)
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    log_path = directory / "registry.log"
    # A clean environment: the registry reads REGISTRY_* variables over its config file.
    process = processes.Process("registry", ["env", "-i", str(binary), "serve", str(config_path)], log_path)
    began = time.monotonic()
    process.start()
    try:
        registry = Registry(
            host=f"{network.LOOPBACK}:{port}",
            username=USERNAME,
            password=password,
            ca_pem=authority.ca.cert,
            cert_dir=cert_dir,
            directory=directory,
            log_path=log_path,
            startup_seconds=0.0,
        )
        try:
            processes.wait_for(
                lambda: registry.request("/v2/", timeout=2.0).status == 401,
                "the registry to serve /v2/",
                processes={"registry": process},
                log_path=log_path,
                timeout=timeout,
                interval=0.05,
            )
        except errors.ControlPlaneError as exc:
            raise RegistryError(str(exc)) from exc
        answer = registry.request("/v2/", credentials=registry.credentials)
        if answer.status != 200:
            raise RegistryError(
                f"the registry refuses its own user: HTTP {answer.status}; last lines of {log_path.name}:\n"
                f"{processes.tail(log_path)}"
            )
        registry = dataclasses.replace(registry, startup_seconds=time.monotonic() - began)
        logger.info("test registry at %s serving in %.2fs", registry.url, registry.startup_seconds)
        yield registry
    finally:
        process.stop()
        network.release_ports([port])
